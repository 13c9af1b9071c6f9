-- Health check.
SELECT 1
