//! Criterion benches of the native hot path, without Python: descriptor batches of 100, the
//! rate-limit decision (goal: well under 1 µs, including the clock read and the mutex the Python
//! binding takes), and the Thrift struct walk over enqueue payloads.

use std::hint::black_box;
use std::sync::Mutex;
use std::time::Instant;

use _pinlater::queue::descriptor;
use _pinlater::queue::job_buffer::{BufferedJob, JobBuffer};
use _pinlater::queue::rate_limiter::RateLimiter;
use _pinlater::wire::struct_end;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const BATCH: u64 = 100;

fn descriptors(c: &mut Criterion) {
    let priorities: Vec<i64> = (0..100_i64).map(|i| i % 3 + 1).collect();
    let local_ids: Vec<u64> = (0..BATCH).map(|i| 1_000_000_000 + i * 7_919).collect();
    let encoded = descriptor::encode_batch("test_queue", "1d1", &priorities, &local_ids).unwrap();

    let mut group = c.benchmark_group("descriptor");
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("encode_batch_100", |b| {
        b.iter(|| {
            descriptor::encode_batch(
                black_box("test_queue"),
                black_box("1d1"),
                black_box(&priorities),
                black_box(&local_ids),
            )
        });
    });
    group.bench_function("decode_batch_100", |b| {
        b.iter(|| descriptor::decode_batch(black_box(&encoded).iter().map(String::as_str)));
    });
    group.finish();
}

fn rate_limit(c: &mut Criterion) {
    let mut group = c.benchmark_group("ratelimit");
    let mut limiter = RateLimiter::new(1.0).unwrap();
    for i in 0..100 {
        limiter
            .set_rate(&format!("queue_{i}"), 1e9, Instant::now())
            .unwrap();
    }
    let now = Instant::now();
    group.bench_function("try_acquire_fixed_clock", |b| {
        b.iter(|| limiter.try_acquire(black_box("queue_42"), black_box(1), now));
    });
    group.bench_function("try_acquire_unlimited_queue", |b| {
        b.iter(|| limiter.try_acquire(black_box("free"), black_box(1), now));
    });
    // What the Python binding does per call: lock, read the clock, decide.
    let shared = Mutex::new(limiter);
    group.bench_function("try_acquire_mutex_and_clock", |b| {
        b.iter(|| {
            shared
                .lock()
                .unwrap()
                .try_acquire(black_box("queue_42"), black_box(1), Instant::now())
        });
    });
    group.finish();
}

/// The broker buffer: refill 1000 jobs over three priorities, then take them in batches of 100
/// (what one worker dequeue does under the buffer's mutex).
fn broker_buffer(c: &mut Criterion) {
    let jobs = |priority: i64| {
        (0..334_i64).map(move |i| BufferedJob {
            shard: "1".to_owned(),
            priority,
            local_id: i,
            body: vec![0_u8; 64],
            attempts_allowed: 2,
            attempts_remaining: 2,
            reserved_at_ms: 0,
        })
    };
    let mut group = c.benchmark_group("broker");
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("take_100_of_1000", |b| {
        b.iter_batched(
            || {
                let mut buffer = JobBuffer::new(1002);
                for p in 1..=3 {
                    buffer.push(jobs(p));
                }
                buffer
            },
            |mut buffer| black_box(buffer.take(100)),
            criterion::BatchSize::SmallInput,
        );
    });
    group.finish();
}

/// An `enqueueJobs` argument struct as thriftpy2 writes it: `n` jobs with 100-byte bodies and
/// the IDL defaults (priority, attempts, custom status) set.
fn enqueue_args(n: usize) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, ttype: u8, id: i16) {
        out.push(ttype);
        out.extend_from_slice(&id.to_be_bytes());
    }
    fn string(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&i32::try_from(bytes.len()).unwrap().to_be_bytes());
        out.extend_from_slice(bytes);
    }
    let mut out = Vec::new();
    field(&mut out, 12, 1); // context
    field(&mut out, 11, 1);
    string(&mut out, b"bench:localhost");
    out.push(0);
    field(&mut out, 12, 2); // request
    field(&mut out, 11, 1);
    string(&mut out, b"test_queue");
    field(&mut out, 15, 2);
    out.push(12);
    out.extend_from_slice(&i32::try_from(n).unwrap().to_be_bytes());
    for _ in 0..n {
        field(&mut out, 11, 1);
        string(&mut out, &[b'x'; 100]);
        field(&mut out, 3, 2);
        out.push(1);
        field(&mut out, 8, 4);
        out.extend_from_slice(&2_i32.to_be_bytes());
        field(&mut out, 11, 5);
        string(&mut out, b"");
        out.push(0);
    }
    out.extend_from_slice(&[0, 0]);
    out
}

fn thrift_walk(c: &mut Criterion) {
    let mut group = c.benchmark_group("thrift_walk");
    for n in [100_u64, 1000] {
        let payload = enqueue_args(usize::try_from(n).unwrap());
        assert_eq!(struct_end::struct_end(&payload, 0), Ok(payload.len()));
        group.throughput(Throughput::Elements(n));
        group.bench_function(format!("enqueue_{n}_jobs"), |b| {
            b.iter(|| struct_end::struct_end(black_box(&payload), 0));
        });
    }
    group.finish();
}

criterion_group!(benches, descriptors, rate_limit, broker_buffer, thrift_walk);
criterion_main!(benches);
