"""Daily retraining of the CTR model: validate -> preprocess -> train -> evaluate -> push.

Built by the one Airflow DAG factory (`retrain.orchestration.dag_factory`) from the CTR family's descriptor
(`retrain.orchestration.families.CTR`): every task builds a spec and runs a step from
`components/ctr/` in a child process, so TensorFlow, Beam and great-expectations never
load into the scheduler or the DAG processor.
"""
from retrain.orchestration.families import CTR
from retrain.orchestration.dag_factory import make_dag

ctr_daily_retrain = make_dag(CTR)
ctr_daily_retrain()
