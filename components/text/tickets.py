"""A small synthetic support-ticket corpus: a text dataset shaped unlike the bundled
reviews (other labels, a binary task, a text template over two columns), for trying the
text family on data it was not tuned on. Used by the user-corpus DAG test and the
reliability campaign; `CONFIG` is the family config a user would write for it.
"""
from __future__ import annotations

import random

CONFIG = """\
example_id: ticket_id
text_template: "{subject}. {body}"
tasks:
  queue:
    label_column: team
    labels: [billing, outage]
    positive: outage
validation:
  min_rows: 20
max_seq_length: 32
"""
WORDS = {   # queue: (subjects, bodies)
    "billing": (["Refund request", "Invoice question", "Charged twice", "Payment issue"],
                ["my card was charged twice this month", "the invoice shows the wrong amount",
                 "please refund the last payment", "I was billed after I cancelled",
                 "the price on my receipt is higher than advertised"]),
    "outage": (["Site down", "Cannot log in", "Service unavailable", "App crashes"],
               ["the dashboard shows error 503 since this morning",
                "nothing loads and the page times out", "the server is not responding at all",
                "the app crashes on start and stays offline",
                "all requests fail with a connection error"]),
}


def tickets(day: int, n: int) -> list[dict]:
    """`n` tickets of one day, the same for the same `day` (seeded)."""
    rnd = random.Random(day)
    rows = []
    for i in range(n):
        team = rnd.choice(sorted(WORDS))
        subjects, bodies = WORDS[team]
        rows.append({"ticket_id": f"T{day:02d}{i:04d}", "subject": rnd.choice(subjects),
                     "body": f"{rnd.choice(bodies)}, ticket {day}-{i} from customer "
                             f"{rnd.randint(1, 10_000)}", "team": team,
                     "channel": rnd.choice(["mail", "chat"])})
    return rows
