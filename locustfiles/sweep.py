"""The A/B sweep that spec-ab runs: streaming chat completions under the concurrency ladder.

`locust -f locustfiles/sweep.py --host http://HOST:PORT --metrics-url http://HOST:PORT/metrics
--levels 1,4,16,64 --stage-time 60s --warmup 5s --csv runs/NAME/arm`
"""

from locust_spec import ChatCompletionUser
from locust_spec.wiring.shape import ConcurrencyLadder  # noqa: F401  (Locust runs the shape found here)


class ChatUser(ChatCompletionUser):
    pass
