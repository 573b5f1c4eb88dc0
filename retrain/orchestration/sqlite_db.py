"""Connection arguments for a SQLite metadata DB (`make ui`, `retrain demo`): SQLite lets one
writer in at a time, and Python's sqlite3 gives up waiting for the lock after 5 s. On a
loaded 2-core machine the scheduler, the task processes' execution API and the API server
write at once, and a Trigger answered HTTP 500 ("database is locked") after those 5 s
(seen in the first-hour browser test while another test's stack ran beside it). 30 s
keeps a busy moment a wait instead of an error. scripts/airflow-env.sh names this dict in
[database] sql_alchemy_connect_args (and the async variant) when the DB is SQLite."""

CONNECT_ARGS = {"timeout": 30}
