"""The epsim app: `streamlit run app/main.py`. Routes to the pages; each page renders itself.

Pages: Scenario (run one), Predicted vs measured (the profile against the records), EPLB
(load and balance over time, the rebalance interval), Planner (a sweep's Pareto frontier and
the cheapest configuration meeting an SLO), Compare (two runs side by side), Held to silicon
(epsim and AIConfigurator on the field's measured deployments). Works on a machine without a GPU.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:            # `streamlit run` puts app/ on the path, not the repo
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

# epsim's packages in one order, before any page: every session's script thread runs this file
# first, so two first page loads (say Scenario and Held to silicon) cannot import them in
# different orders, which deadlocks Python's import locks and leaves one thread a partially
# initialised `epsim.cost.model` (an ImportError on the page)
import epsim.cost  # noqa: E402,F401
import epsim.sim  # noqa: E402,F401
import epsim.validate  # noqa: E402,F401
import epsim.plan  # noqa: E402,F401

st.set_page_config(page_title="epsim", page_icon=":material/hub:", layout="wide")

PAGES = [
    st.Page("pages/scenario.py", title="Scenario", icon=":material/play_circle:", default=True),
    st.Page("pages/validation.py", title="Predicted vs measured", icon=":material/scatter_plot:"),
    st.Page("pages/eplb.py", title="EPLB", icon=":material/balance:"),
    st.Page("pages/planner.py", title="Planner", icon=":material/query_stats:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("pages/silicon.py", title="Held to silicon", icon=":material/fact_check:"),
]
st.navigation(PAGES).run()
