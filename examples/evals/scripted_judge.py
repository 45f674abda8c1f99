"""An offline judge for `LLMJudge`: a scripted model that checks the rubric's quoted terms.

It passes an answer that mentions every term the rubric puts in double quotes (ignoring case),
and says which are missing otherwise — the JSON verdict a real judge model would write.

    pes-agent eval dataset.yaml --demo --judge scripted_judge:JUDGE   # in examples/evals
"""

from __future__ import annotations

import json
import re

from pes_agent import LLMRequest
from pes_agent.testing import ScriptedProvider


def verdict(request: LLMRequest) -> str:
    """The verdict on the answer in the judge's prompt, by the rubric's quoted terms."""
    prompt = request.messages[-1].content
    rubric = prompt.split("# Rubric\n", 1)[-1].split("\n\n# ", 1)[0]
    answer = prompt.split("# Answer\n", 1)[-1].casefold()
    missing = [term for term in re.findall(r'"([^"]+)"', rubric) if term.casefold() not in answer]
    if missing:
        return json.dumps({"pass": False, "reason": f"the answer never mentions {missing}"})
    return json.dumps({"pass": True, "reason": "the answer covers every point of the rubric"})


JUDGE = ScriptedProvider([verdict], repeat=True, name="scripted", model="rubric-judge")
