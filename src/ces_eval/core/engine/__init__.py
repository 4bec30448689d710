"""The run engine: plans and plays evaluation runs, observes and scores their outcomes (against
scripted rules or the team's own agent), recomputes stored metrics, and fires scheduled runs."""
