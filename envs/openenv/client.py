"""A running OpenEnv server as a `TextEnv`: `envs.make("openenv/http://host:port")`.

Speaks OpenEnv's WebSocket protocol through the `openenv` package's own `GenericEnvClient` (one server
session per env). The server's MCP tools (`list_tools`) become tool schemas for the chat template; a
Hermes `<tool_call>` in an assistant turn becomes a `call_tool` action, and the server's per-step
rewards and `done` flow through. An assistant turn without a call ends the episode: a STARE server
(`stare envs serve`) grades it server-side (a `message` action); any other server's episode ends there,
graded locally when `reset(options={"task": Task})` gave a task, else with reward 0.

Every remote call is bounded (`connect_timeout`, `timeout`) and message size is capped
(`max_message_mb`); an unreachable server, a timeout, a protocol error or an oversized message raises
`RemoteEnvError` naming the server and the call: a world failure, recorded on the episode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from openenv.core.generic_client import GenericEnvClient
from websockets.exceptions import ConnectionClosed

from envs.core import Grader, Message, StepResult, TextEnv
from envs.errors import RemoteEnvError, ResetNeeded, ToolError
from envs.parsers import ToolCallParser
from envs.remote import RemoteTool, openai_schema, tool_result_text
from envs.tools import ToolSet
from tasks.task import Grade, Task

_PROMPT_FIELDS = ("prompt", "question", "text", "content", "message")


def default_prompt(observation: Mapping[str, Any]) -> str:
    """The user message for a reset observation without `messages`.

    The first text field among "prompt", "question", "text", "content", "message" (of the observation,
    then of its metadata), else the observation's fields as JSON.
    """
    for where in (observation, observation.get("metadata") or {}):
        texts = [where[n] for n in _PROMPT_FIELDS if isinstance(where.get(n), str) and where[n].strip()]
        if texts:
            return texts[0]
    fields = {k: v for k, v in observation.items() if k not in ("done", "reward", "metadata")}
    return json.dumps(fields or dict(observation.get("metadata") or {}), default=str)


class OpenEnvTextEnv(TextEnv):
    """An OpenEnv server's environment, played as a multi-turn text env with its MCP tools.

    Args:
        base_url: The server, e.g. "http://127.0.0.1:8000" (ws:// and wss:// work too).
        token: Bearer token of a server started with `--token` (sent as `Authorization`).
        timeout: Seconds to wait for each reply (reset, step, tool call).
        connect_timeout: Seconds to open the WebSocket.
        max_message_mb: Largest reply accepted; a larger one fails the episode with a clear error.
        prompt_fn: Reset observation -> user message, for servers without `messages` (default: a text
            field such as "prompt", else the observation as JSON).
        system_prompt, parser, max_tool_turns, max_calls_per_turn, max_output_chars, tool_error_penalty,
        grader: As for `TextEnv` (the grader scores the final turn against a task given to `reset`).
    """

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 60.0,
                 connect_timeout: float = 10.0, max_message_mb: float = 16.0,
                 prompt_fn: Callable[[Mapping[str, Any]], str] = default_prompt,
                 system_prompt: str | None = None, parser: str | ToolCallParser = "hermes",
                 max_tool_turns: int = 8, max_calls_per_turn: int = 4, max_output_chars: int = 2048,
                 tool_error_penalty: float = 0.0, grader: Grader | None = None) -> None:
        if not base_url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(f"base_url must be an http(s):// or ws(s):// URL of an OpenEnv server, "
                             f"got {base_url!r}")
        if timeout <= 0 or connect_timeout <= 0 or max_message_mb <= 0:
            raise ValueError("timeout, connect_timeout and max_message_mb must be > 0")
        super().__init__(dataset=f"openenv:{base_url}", system_prompt=system_prompt, parser=parser,
                         max_tool_turns=max_tool_turns, max_calls_per_turn=max_calls_per_turn,
                         max_output_chars=max_output_chars, tool_error_penalty=tool_error_penalty,
                         grader=grader)
        self.base_url, self.timeout, self.max_message_mb = base_url.rstrip("/"), timeout, max_message_mb
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._client = GenericEnvClient(base_url=self.base_url, connect_timeout_s=connect_timeout,
                                        message_timeout_s=timeout, max_message_size_mb=max_message_mb,
                                        headers=headers).sync()
        self.prompt_fn = prompt_fn
        self._given_task: Task | None = None
        self._grades_server_side = self._listed = False
        self._pending = {"reward": 0.0, "done": False, "info": None}

    # ---- remote calls ---------------------------------------------------------------------------
    def _remote(self, call: str, fn: Callable[[], Any]) -> Any:
        """Run one client call; every failure becomes `RemoteEnvError` naming the server and the call."""
        where = f"OpenEnv server {self.base_url}: {call}"
        try:
            result = fn()
        except TimeoutError as err:
            raise RemoteEnvError(f"{where} got no reply within {self.timeout:g} s") from err
        except ConnectionClosed as err:
            too_big = 1009 in (getattr(err.rcvd, "code", None), getattr(err.sent, "code", None))
            why = (f"a reply was larger than max_message_mb={self.max_message_mb:g}" if too_big
                   else f"the connection closed ({err})")
            raise RemoteEnvError(f"{where} failed: {why}") from err
        except ConnectionError as err:
            raise RemoteEnvError(f"{where} is unreachable: {err}") from err
        except Exception as err:  # a protocol or server-side error (the client raises RuntimeError)
            raise RemoteEnvError(f"{where} failed: {type(err).__name__}: {err}") from err
        if not isinstance(result.observation, Mapping):
            kind = type(result.observation).__name__
            raise RemoteEnvError(f"{where} broke the protocol: the observation is a {kind}, not an object")
        return result

    def _list_tools(self) -> list[RemoteTool]:
        reply = self._remote("step(list_tools)", lambda: self._client.step({"type": "list_tools"}))
        specs = reply.observation.get("tools")
        if not isinstance(specs, list):
            raise RemoteEnvError(f"OpenEnv server {self.base_url}: step(list_tools) broke the protocol: "
                                 "no 'tools' list (is it an MCP environment?)")
        schemas = [openai_schema(s["name"], s.get("description"), s.get("input_schema", s.get("inputSchema")))
                   for s in specs]
        return [RemoteTool(s["function"]["name"], s, self._call_tool) for s in schemas]

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """One `call_tool` step; banks its reward and `done` for `step()` to report."""
        action = {"type": "call_tool", "tool_name": name, "arguments": arguments}
        result = self._remote(f"step(call_tool {name!r})", lambda: self._client.step(action))
        self._pending["reward"] += float(result.reward or 0.0)
        info = (result.observation.get("metadata") or {}).get("info")
        if result.done:
            self._pending.update(done=True, info=info)
        error = result.observation.get("error")
        if error:
            kind = str(error.get("error_type", "tool_error"))
            raise ToolError(f"Error: {error.get('message', error)}", kind=kind)
        return tool_result_text(result.observation.get("result") or {}, name)

    # ---- episode --------------------------------------------------------------------------------
    @property
    def task(self) -> Task | None:
        """The task given to `reset(options={"task": ...})`, or None when the server chose the episode."""
        return self._given_task

    def tasks(self) -> list[Task]:
        """The server owns the dataset; pass `options={"task": Task}` to choose one (STARE servers)."""
        raise ValueError(f"OpenEnv server {self.base_url} owns its tasks; there is no local dataset")

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Start a server episode (`seed`, and `options["task"]` for a STARE server)."""
        super(TextEnv, self).reset(seed=seed)
        self._end_episode()
        task = (options or {}).get("task")
        if task is not None and not isinstance(task, Task):
            raise TypeError(f"options['task'] must be a tasks.Task, got {type(task).__name__}")
        kwargs = {"seed": seed} if seed is not None else {}
        if task is not None:
            kwargs["task"] = task.to_dict()
        observation = self._remote("reset", lambda: self._client.reset(**kwargs)).observation
        self._grades_server_side = "tool_schemas" in observation
        if not self._listed:  # tools are listed once per connection
            self.tools = ToolSet(self._list_tools(), max_output_chars=self.tools.max_output_chars)
            self._listed = True
        messages = observation.get("messages") or self.initial_messages_of(observation)
        self._given_task = task
        self._task = task or Task(id=str((observation.get("info") or {}).get("task_id") or "openenv-episode"),
                                  prompt=messages[-1]["content"], answer="(graded by the server)",
                                  meta={"source": self.base_url})
        self._running, self._tool_turns, self._episode_errors = True, 0, 0
        info = {**(observation.get("info") or {}), "tools": [dict(s) for s in self.tools.schemas]}
        return messages, info

    def initial_messages_of(self, observation: Mapping[str, Any]) -> list[Message]:
        """System prompt (when set) and the user message `prompt_fn(observation)`."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [{"role": "user", "content": self.prompt_fn(observation)}]

    def step(self, action: str) -> StepResult:
        """Tool calls go to the server one by one; an answer ends the episode (graded, see the module)."""
        if not isinstance(action, str):
            raise TypeError(f"action must be the assistant's text (str), got {type(action).__name__}")
        if not self._running:
            raise ResetNeeded("call reset() before step(); the previous episode has ended")
        attempts = self.parser.parse(action, self.tools) if len(self.tools) else []
        if not attempts:
            return self._answer(action)
        self._pending = {"reward": 0.0, "done": False, "info": None}
        result = self.step_calls(attempts)
        if not self._pending["done"] or not self._running:
            return result._replace(reward=result.reward + self._pending["reward"])
        return self._server_ended(result)

    def _server_ended(self, result: StepResult) -> StepResult:
        """A tool call ended the server's episode: its reward and (STARE) grade close ours."""
        info = dict(self._pending["info"] or {})
        reward = self._pending["reward"]
        grade = info.get("grade") or {"status": "correct" if reward > 0 else "wrong", "prediction": None,
                                      "correct": reward > 0}
        truncated = "truncated_reason" in info
        self._end_episode()
        final = {**result.info, "grade": grade, "task_id": self._task.id}
        return StepResult(result.messages, reward, not truncated, truncated, final)

    def _answer(self, text: str) -> StepResult:
        """The closing turn: graded by a STARE server, else locally against a given task."""
        if not self._grades_server_side:
            task = self._given_task
            grade = self.grader(text, task) if task else Grade(False, None, "no_answer")
            return self._finish(grade, terminated=True)
        message = {"type": "message", "content": text}
        result = self._remote("step(message)", lambda: self._client.step(message))
        info = dict(result.observation.get("info") or {})
        if "grade" not in info or not result.done:
            raise RemoteEnvError(f"OpenEnv server {self.base_url}: step(message) broke the protocol: "
                                 "an answer must end the episode with info['grade']")
        self._end_episode()
        truncated = bool(result.observation.get("truncated"))
        return StepResult([], float(result.reward or 0.0), not truncated, truncated, info)

    def close(self) -> None:
        """End the episode and close the connection (the server session ends with it)."""
        super().close()
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 - closing a dead connection must not raise
            pass


__all__ = ["OpenEnvTextEnv", "default_prompt"]
