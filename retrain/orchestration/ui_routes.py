"""Where the Retrain views live in the Airflow UI: the one URL prefix that the plugin
registers and the views build their links from (a third module, so neither imports the
other). Stdlib only.
"""
PREFIX = "/retrain"
