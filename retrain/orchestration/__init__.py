"""What runs inside Airflow: the DAG factory, family descriptors, the tracked launcher,
lineage, publishing, the UI plugin and the local stacks. Stdlib + Airflow only (the import
contracts in pyproject.toml keep step code and heavy libraries out).
"""
