"""Point the app at the team's agent on the server `ces-eval exec` started: its address is in
CES_EVAL_URL, the app in APP, the agent in AGENT_URL (docs/agents.md, "Setting the endpoint")."""

import os

from ces_eval.testing import Emulator

Emulator(os.environ["CES_EVAL_URL"]).set_agent(os.environ["APP"], os.environ["AGENT_URL"])
