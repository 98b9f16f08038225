"""`python -m aromcp_workflows` runs the command-line interface."""

from aromcp_workflows.cli import main

raise SystemExit(main())
