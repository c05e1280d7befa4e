"""One user class per server in $FAULT_HOSTS ({"name": url}): each sends only prompts of class `name`,
so a row's prompt_class says which server (and fault) it met."""

import json
import os

from locust_spec import ChatCompletionUser
from locust_spec.core.prompts import Prompt


def _user_for(name: str, url: str) -> type:
    prompt = Prompt(id=name, cls=name, messages=({"role": "user", "content": "Say hello to the team."},),
                    max_tokens=None)

    class FaultHostUser(ChatCompletionUser):
        host = url

        def send(self, _prompt: Prompt) -> None:
            super().send(prompt)

    FaultHostUser.__name__ = FaultHostUser.__qualname__ = f"User_{name.replace(' ', '_')}"
    return FaultHostUser


globals().update((cls.__name__, cls) for cls in (
    _user_for(name, url) for name, url in json.loads(os.environ.get("FAULT_HOSTS", "{}")).items()))
