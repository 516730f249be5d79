"""The epsim Streamlit app: `streamlit run app/main.py` (pages under app/pages/)."""
