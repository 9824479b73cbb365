from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from bedrock_server import BedrockServer
from botocore.config import Config

import memtap
import memtap_bedrock
from memtap.storage import InMemoryStore

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


@pytest.fixture(scope="session")
def _bedrock_server() -> Iterator[BedrockServer]:
    with BedrockServer() as server:
        yield server


@pytest.fixture
def bedrock_server(_bedrock_server: BedrockServer) -> BedrockServer:
    _bedrock_server.clear()
    return _bedrock_server


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def mem(store: InMemoryStore) -> Iterator[memtap.Memory]:
    memory = memtap.Memory(store, plugins=[memtap_bedrock], entry_points=False)
    yield memory
    memory.close()
