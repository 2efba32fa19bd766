"""Reads of the Reflection page: recent runs, cached profiles, the LLM budget and its usage."""

from core.lib.llm_budget import llm_budget_state, llm_usage_days
from reflection.selectors import reflection_profile_list, reflection_run_list

RUNS_SHOWN = 25
PROFILES_SHOWN = 12
USAGE_DAYS = 7


def reflection_page_data(*, principal) -> dict:
    runs = list(reflection_run_list(principal=principal)[:RUNS_SHOWN])
    return {
        "runs": runs,
        "polling": any(run.is_active for run in runs),
        "profiles": list(reflection_profile_list(principal=principal)[:PROFILES_SHOWN]),
        "budget": llm_budget_state(workspace=principal.workspace),
        "usage_days": llm_usage_days(workspace=principal.workspace, days=USAGE_DAYS),
    }
