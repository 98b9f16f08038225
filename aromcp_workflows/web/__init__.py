"""The web view of running instances (`aromcp-workflows ui`); see `app.py`."""
