"""A local xAI Chat gRPC server for tests: the SDK's own generated servicer
(``chat_pb2_grpc.ChatServicer``) on 127.0.0.1, answering ``GetCompletion`` and
``GetCompletionChunk`` from a script of :class:`memtap.testing.server.Reply` objects
(``You said: <text>`` when nothing is scripted), like the core scripted server."""

from __future__ import annotations

import threading
from collections import deque
from concurrent import futures
from typing import Any

import grpc
import xai_sdk
from google.protobuf.json_format import MessageToDict
from xai_sdk.proto import chat_pb2, chat_pb2_grpc, sample_pb2, usage_pb2

from memtap.testing.server import Reply


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, count)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _last_user_text(request: Any) -> str:
    for m in reversed(request.messages):
        if m.role == chat_pb2.ROLE_USER:
            return "\n".join(c.text for c in m.content if c.text)
    return ""


#: The gRPC status xAI answers with for what HTTP calls a status (as gRPC gateways map them).
_GRPC_STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}


class _Servicer(chat_pb2_grpc.ChatServicer):
    def __init__(self, owner: XaiServer) -> None:
        self.owner = owner

    def _reply(self, request: Any, context: Any) -> tuple[Reply, int]:
        reply, ident = self.owner.take(request, dict(context.invocation_metadata()))
        if reply.status != 200:
            context.abort(
                _GRPC_STATUS.get(reply.status, grpc.StatusCode.INTERNAL), reply.text or "scripted error"
            )
        return reply, ident

    @staticmethod
    def _calls(reply: Reply, ident: int) -> list[Any]:
        return [
            chat_pb2.ToolCall(
                id=spec.id or f"call_{ident}_{i}",
                type=chat_pb2.TOOL_CALL_TYPE_CLIENT_SIDE_TOOL,
                function=chat_pb2.FunctionCall(name=spec.name, arguments=spec.arguments),
            )
            for i, spec in enumerate(reply.tool_calls)
        ]

    @staticmethod
    def _finish(reply: Reply) -> int:
        return sample_pb2.REASON_TOOL_CALLS if reply.tool_calls else sample_pb2.REASON_STOP

    @staticmethod
    def _usage(reply: Reply) -> Any:
        total = reply.input_tokens + reply.output_tokens
        return usage_pb2.SamplingUsage(
            prompt_tokens=reply.input_tokens, completion_tokens=reply.output_tokens, total_tokens=total
        )

    def GetCompletion(self, request: Any, context: Any) -> Any:
        reply, ident = self._reply(request, context)
        message = chat_pb2.CompletionMessage(
            content=reply.text, role=chat_pb2.ROLE_ASSISTANT, tool_calls=self._calls(reply, ident)
        )
        output = chat_pb2.CompletionOutput(finish_reason=self._finish(reply), index=0, message=message)
        return chat_pb2.GetChatCompletionResponse(
            id=f"resp_{ident}", model=request.model, outputs=[output], usage=self._usage(reply)
        )

    def GetCompletionChunk(self, request: Any, context: Any) -> Any:
        reply, ident = self._reply(request, context)

        def chunk(delta: Any, finish: int = 0, usage: Any = None) -> Any:
            output = chat_pb2.CompletionOutputChunk(index=0, delta=delta, finish_reason=finish)
            return chat_pb2.GetChatCompletionChunk(
                id=f"resp_{ident}", model=request.model, outputs=[output], usage=usage
            )

        for piece in _pieces(reply.text, reply.chunks):
            yield chunk(chat_pb2.Delta(content=piece, role=chat_pb2.ROLE_ASSISTANT))
        if reply.tool_calls:
            yield chunk(chat_pb2.Delta(role=chat_pb2.ROLE_ASSISTANT, tool_calls=self._calls(reply, ident)))
        yield chunk(chat_pb2.Delta(), self._finish(reply), self._usage(reply))


class XaiServer:
    """The scripted server; ``api_host`` for ``xai_sdk.Client(..., use_insecure_channel=True)``.

    ``requests`` holds each request as JSON (``MessageToDict`` with proto field names, as
    the ``xai.chat`` protocol reads it) and ``metadata`` the gRPC metadata it came with.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.metadata: list[dict[str, str]] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._ids = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        chat_pb2_grpc.add_ChatServicer_to_server(_Servicer(self), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> XaiServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)

    @property
    def api_host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self.metadata.clear()
            self._replies.clear()

    def take(self, request: Any, metadata: dict[str, str]) -> tuple[Reply, int]:
        with self._lock:
            self.requests.append(MessageToDict(request, preserving_proto_field_name=True))
            self.metadata.append(metadata)
            self._ids += 1
            reply = (
                self._replies.popleft()
                if self._replies
                else Reply(text=f"You said: {_last_user_text(request)}")
            )
            return reply, self._ids

    def last_json(self) -> dict[str, Any]:
        with self._lock:
            return self.requests[-1]


API_KEY = "xai-test0123456789abcdefghijklmnop"


def make_xai(server: XaiServer, *, is_async: bool = False):
    """A real xai-sdk client for the local server (plaintext gRPC: a supported SDK option)."""
    cls = xai_sdk.AsyncClient if is_async else xai_sdk.Client
    return cls(api_key=API_KEY, api_host=server.api_host, use_insecure_channel=True)
