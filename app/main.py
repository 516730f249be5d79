"""The epsim app: `streamlit run app/main.py`. Routes to the pages; each page renders itself.

Pages: Scenario (run one), Predicted vs measured (the profile against the records), EPLB
(load and balance over time, the rebalance interval), Planner (a sweep's Pareto frontier and
the cheapest configuration meeting an SLO), Compare (two runs side by side). Works on a machine
without a GPU.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:            # `streamlit run` puts app/ on the path, not the repo
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

st.set_page_config(page_title="epsim", page_icon=":material/hub:", layout="wide")

PAGES = [
    st.Page("pages/scenario.py", title="Scenario", icon=":material/play_circle:", default=True),
    st.Page("pages/validation.py", title="Predicted vs measured", icon=":material/scatter_plot:"),
    st.Page("pages/eplb.py", title="EPLB", icon=":material/balance:"),
    st.Page("pages/planner.py", title="Planner", icon=":material/query_stats:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
]
st.navigation(PAGES).run()
