"""Daily retraining of the CTR model: validate -> preprocess -> train -> evaluate -> push.

Built by the one Airflow DAG factory (`retrain.dag_factory`) from the CTR family's descriptor
(`components.families.CTR`): every task builds a spec and runs a step from
`components/ctr/` in a child process, so TensorFlow, Beam and great-expectations never
load into the scheduler or the DAG processor.
"""
from components.families import CTR
from retrain.dag_factory import make_dag

ctr_daily_retrain = make_dag(CTR)
ctr_daily_retrain()
