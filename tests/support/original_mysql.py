"""What the original PinLater wrote to MySQL, for tests that serve its databases as they are."""

#: The original's CREATE_JOBS_TABLE (MySQLQueries.java), as a database it created has it.
ORIGINAL_JOBS_TABLE = """
CREATE TABLE {table}
( local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT
, state TINYINT NOT NULL
, claim_descriptor VARCHAR(200)
, attempts_allowed INT
, attempts_remaining INT NOT NULL
, custom_status VARCHAR(5000)
, updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP
, created_at TIMESTAMP NOT NULL
, run_after TIMESTAMP NOT NULL
, body BLOB NOT NULL
, PRIMARY KEY (local_id), INDEX (state, run_after), INDEX (claim_descriptor)
 ) ENGINE=INNODB
"""
