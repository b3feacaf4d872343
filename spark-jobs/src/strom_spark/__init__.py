"""PySpark data source `strom`."""
