"""A conversation that grows turn by turn: each request carries the whole history, the assistant's replies
included, so the prompt gets longer (and the server's prefix cache matters more) with every turn.

`locust -f locustfiles/multiturn.py --host http://HOST:PORT --csv runs/multiturn`

Every turn is measured like the built-in task's requests: one row in PREFIX_requests.csv (class `turn-N`),
Locust's TTFT / TPOT / E2E, the exact histograms. The options (`--max-tokens`, `--temperature`, ...) apply;
fields passed to `stream` (here `max_tokens`) win over them.
"""

from locust import task

from locust_spec import ChatClientUser

SYSTEM = "You are a patient tutor. Answer in two or three sentences."
QUESTIONS = (
    "What is speculative decoding in language model serving?",
    "Why can it make each output token cheaper?",
    "When does it stop paying off?",
)


class Conversation(ChatClientUser):
    @task
    def conversation(self) -> None:
        messages = [{"role": "system", "content": SYSTEM}]
        for turn, question in enumerate(QUESTIONS, 1):
            messages.append({"role": "user", "content": question})
            capture = self.client.stream(messages, name=f"turn-{turn}", prompt_id=f"tutor-{turn}",
                                         max_tokens=96)
            if capture.error:
                return  # its row says why; a conversation without that answer would be another one
            messages.append({"role": "assistant", "content": capture.reply()})
