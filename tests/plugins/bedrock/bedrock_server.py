"""A local bedrock-runtime endpoint for tests: Converse, ConverseStream, InvokeModel and
InvokeModelWithResponseStream (Anthropic Messages bodies), answering from a script of
:class:`memtap.testing.server.Reply` objects like the core scripted server (``You said:
<text>`` when nothing is scripted).

Streams use the AWS event-stream binary framing (``application/vnd.amazon.eventstream``),
encoded here: prelude (total length, headers length, CRC32 of those 8 bytes), headers
(name length, name, type 7 = string, value length, value), payload, CRC32 of the whole
message. botocore's own ``EventStream`` parser decodes it, checksums included.

A reply's ``raw_body`` is sent as it is by ``invoke``; ``invoke-with-response-stream`` reads
it as a JSON array of Anthropic events and sends each as a ``chunk``.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import threading
from binascii import crc32
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any

import boto3
from botocore.config import Config

from memtap.testing.server import RecordedRequest, Reply

#: The error type bedrock-runtime names for each status.
_ERROR_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    429: "ThrottlingException",
    503: "ServiceUnavailableException",
}
_ROUTE = re.compile(r"^/model/([^/]+)/(converse|converse-stream|invoke|invoke-with-response-stream)$")


def encode_event(event_type: str, payload: dict[str, Any]) -> bytes:
    """One event-stream message carrying ``payload`` as JSON."""
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    header_bytes = b"".join(
        struct.pack(">B", len(name))
        + name.encode()
        + b"\x07"
        + struct.pack(">H", len(value))
        + value.encode()
        for name, value in headers.items()
    )
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 12 + len(header_bytes) + len(body) + 4, len(header_bytes))
    message = prelude + struct.pack(">I", crc32(prelude) & 0xFFFFFFFF) + header_bytes + body
    return message + struct.pack(">I", crc32(message) & 0xFFFFFFFF)


def pieces(text: str, count: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, count)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _args(arguments: str) -> Any:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _last_user_text(messages: Any) -> str:
    for m in reversed(messages or []):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content
        texts = [b["text"] for b in content or [] if isinstance(b.get("text"), str)]
        if texts:
            return "\n".join(texts)
    return ""


class _Converse:
    @staticmethod
    def _content(reply: Reply, ident: int) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"text": reply.text}] if reply.text or not reply.tool_calls else []
        for i, spec in enumerate(reply.tool_calls):
            tool = {
                "toolUseId": spec.id or f"tooluse_{ident}_{i}",
                "name": spec.name,
                "input": _args(spec.arguments),
            }
            blocks.append({"toolUse": tool})
        return blocks

    @staticmethod
    def _reason(reply: Reply) -> str:
        return reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")

    @staticmethod
    def _usage(reply: Reply) -> dict[str, int]:
        total = reply.input_tokens + reply.output_tokens
        return {"inputTokens": reply.input_tokens, "outputTokens": reply.output_tokens, "totalTokens": total}

    def render(self, reply: Reply, model: str, ident: int) -> dict[str, Any]:
        return {
            "output": {"message": {"role": "assistant", "content": self._content(reply, ident)}},
            "stopReason": self._reason(reply),
            "usage": self._usage(reply),
            "metrics": {"latencyMs": 1},
        }

    def events(self, reply: Reply, model: str, ident: int) -> list[bytes]:
        out = [encode_event("messageStart", {"role": "assistant"})]
        for index, block in enumerate(self._content(reply, ident)):
            if "text" in block:
                for piece in pieces(block["text"], reply.chunks):
                    delta = {"contentBlockIndex": index, "delta": {"text": piece}}
                    out.append(encode_event("contentBlockDelta", delta))
            else:
                tool = block["toolUse"]
                start = {"toolUse": {"toolUseId": tool["toolUseId"], "name": tool["name"]}}
                out.append(encode_event("contentBlockStart", {"contentBlockIndex": index, "start": start}))
                for piece in pieces(json.dumps(tool["input"]), reply.chunks):
                    delta = {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}}
                    out.append(encode_event("contentBlockDelta", delta))
            out.append(encode_event("contentBlockStop", {"contentBlockIndex": index}))
        out.append(encode_event("messageStop", {"stopReason": self._reason(reply)}))
        out.append(encode_event("metadata", {"usage": self._usage(reply), "metrics": {"latencyMs": 1}}))
        return out


class _Anthropic:
    @staticmethod
    def _content(reply: Reply, ident: int) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": reply.text}] if reply.text or not reply.tool_calls else []
        )
        for i, spec in enumerate(reply.tool_calls):
            tool_id = spec.id or f"toolu_{ident}_{i}"
            blocks.append(
                {"type": "tool_use", "id": tool_id, "name": spec.name, "input": _args(spec.arguments)}
            )
        return blocks

    @staticmethod
    def _reason(reply: Reply) -> str:
        return reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")

    def _message(self, reply: Reply, model: str, ident: int, content: list, final: bool) -> dict[str, Any]:
        return {
            "id": f"msg_bdrk_{ident}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": self._reason(reply) if final else None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.input_tokens,
                "output_tokens": reply.output_tokens if final else 1,
            },
        }

    def render(self, reply: Reply, model: str, ident: int) -> dict[str, Any]:
        return self._message(reply, model, ident, self._content(reply, ident), True)

    def anthropic_events(self, reply: Reply, model: str, ident: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [
            {"type": "message_start", "message": self._message(reply, model, ident, [], False)}
        ]
        for index, block in enumerate(self._content(reply, ident)):
            if block["type"] == "text":
                out.append(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    }
                )
                for piece in pieces(block["text"], reply.chunks):
                    delta = {"type": "text_delta", "text": piece}
                    out.append({"type": "content_block_delta", "index": index, "delta": delta})
            else:
                opening = {**block, "input": {}}
                out.append({"type": "content_block_start", "index": index, "content_block": opening})
                for piece in pieces(json.dumps(block["input"]), reply.chunks):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    out.append({"type": "content_block_delta", "index": index, "delta": delta})
            out.append({"type": "content_block_stop", "index": index})
        out.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": self._reason(reply), "stop_sequence": None},
                "usage": {"output_tokens": reply.output_tokens},
            }
        )
        out.append(
            {
                "type": "message_stop",
                "amazon-bedrock-invocationMetrics": {"inputTokenCount": reply.input_tokens},
            }
        )
        return out

    def events(self, reply: Reply, model: str, ident: int) -> list[bytes]:
        given = json.loads(reply.raw_body) if reply.raw_body is not None else None
        return [
            encode_event("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode()})
            for e in given or self.anthropic_events(reply, model, ident)
        ]


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: BedrockServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        TCPServer.server_bind(self)  # no FQDN lookup
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-stream is not the server's problem


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    wbufsize = 1 << 16
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        path, _, query = self.path.partition("?")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        owner = self.server.owner
        owner.record(RecordedRequest("POST", path, query, headers, body))
        match = _ROUTE.match(path)
        if match is None:
            self._send(404, "application/json", b'{"message": "no route"}')
            return
        from urllib.parse import unquote

        model, action = unquote(match.group(1)), match.group(2)
        request = json.loads(body or b"{}")
        wire = _Converse() if action.startswith("converse") else _Anthropic()
        reply, ident = owner.next_reply(_last_user_text(request.get("messages")))
        if reply.status != 200:
            error = json.dumps({"message": reply.text or "scripted error"}).encode()
            self.send_response(reply.status)
            self.send_header("x-amzn-ErrorType", _ERROR_TYPES.get(reply.status, "InternalServerException"))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(error)))
            self.end_headers()
            self.wfile.write(error)
            self.wfile.flush()
            return
        if action == "invoke" and reply.raw_body is not None:
            self._send(200, "application/json", reply.raw_body)
            return
        if action in ("converse", "invoke"):
            self._send(200, "application/json", json.dumps(wire.render(reply, model, ident)).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in wire.events(reply, model, ident):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class BedrockServer:
    """The scripted bedrock-runtime endpoint (``endpoint_url=server.base_url``)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._ids = 0
        self._httpd: _HTTPServer | None = None

    def __enter__(self) -> BedrockServer:
        self._httpd = _HTTPServer(self)
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_port}"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self._replies.clear()

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def next_reply(self, user_text: str) -> tuple[Reply, int]:
        with self._lock:
            self._ids += 1
            reply = self._replies.popleft() if self._replies else Reply(text=f"You said: {user_text}")
            return reply, self._ids

    def last_json(self) -> dict[str, Any]:
        with self._lock:
            return json.loads(self.requests[-1].body)


#: Dummy credentials in the shape of real ones (so a leak would be recognisable).
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"


def make_bedrock(endpoint_url: str | None = None):
    """A real boto3 bedrock-runtime client (no retries) for the local endpoint."""
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=endpoint_url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}),
    )
