"""Fair's extramarital-affairs survey (statsmodels' `datasets/fair/fair.csv`, 6,366 rows)
as a user's low-volume binary event log for the CTR family: one row a respondent, label
`had_affair` (affairs > 0, the leaking `affairs` column dropped), an id and a `wave`
column no feature reads, cut into daily JSONL partitions. Only a feature config
(`fair.yaml`) describes it; no code is edited."""
import csv

from partitions import parser, write_days

a = parser(__doc__, "statsmodels/datasets/fair/fair.csv").parse_args()
rows = []
with open(a.src, newline="") as f:
    for i, r in enumerate(csv.DictReader(f)):
        rows.append({"survey_id": f"fair-{i:05d}", "had_affair": int(float(r["affairs"]) > 0),
                     "rate_marriage": int(float(r["rate_marriage"])),
                     "religious": int(float(r["religious"])),
                     "occupation": f"occ{int(float(r['occupation']))}",
                     "occupation_husb": f"occ{int(float(r['occupation_husb']))}",
                     "age": float(r["age"]), "yrs_married": float(r["yrs_married"]),
                     "children": float(r["children"]), "educ": float(r["educ"]),
                     "wave": "1974"})
write_days(rows, a)
