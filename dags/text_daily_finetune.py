"""Daily fine-tuning of the text model on the user's labelled text: validate -> preprocess
-> finetune -> evaluate -> push.

Built by the one Airflow DAG factory (`retrain.orchestration.dag_factory`) from the text family's descriptor
(`retrain.orchestration.families.TEXT`); columns, tasks, labels and checkpoint come from the
`text_config` file (default: the bundled reviews, `components/text/configs/reviews.yaml`).
"""
from retrain.orchestration.families import TEXT
from retrain.orchestration.dag_factory import make_dag

text_daily_finetune = make_dag(TEXT)
text_daily_finetune()
