-- The migration of a jobs table made without expire_at (by the original server, or before #18):
-- a nullable column at the end, which the original's statements (explicit column lists) never
-- see; an instant change on MariaDB 10.3+ and MySQL 8.0.12+ (no copy of the rows).
-- {table}: the priority's jobs table.
ALTER TABLE {table} ADD COLUMN expire_at BIGINT NULL
