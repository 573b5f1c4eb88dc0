"""Daily top-K recommendations per active user, an Airflow DAG run whenever a CTR model is
published. (Airflow's DAG-discovery safe mode only parses files that name both "airflow"
and "dag": this docstring does.)

Built by `retrain.orchestration.recommend_dag`: scheduled on the CTR model Asset, it
scores users against the candidate pool in a Beam job (`beam_jobs.recommend_ctr`) in a
child process, so TensorFlow and Beam never load into the scheduler.

Active from its first parse (not paused upon creation): being asset-scheduled, it cannot
run before a model is published, and every publish (the demo's included) should get its
lists without a person having to find and unpause it first.
"""
from retrain.orchestration.families import CTR
from retrain.orchestration.recommend_dag import make_recommend_dag

ctr_daily_recommendations = make_recommend_dag(CTR)
ctr_daily_recommendations()
