"""Load generation and measurement: the client tool's load modes and ``pinlater bench``.

``stats``: latency percentiles and rate formatting; ``issuer``: the client tool's enqueue and
dequeue load modes; ``rates`` and ``plan``: target rates and the capacity plan; ``local``: the
servers ``pinlater bench`` starts itself; ``load``: its producer and consumer processes;
``runner``: one benchmark run; ``plot``: its PNG.
"""
