from __future__ import annotations

import pytest
from lc_support import RecordingChatModel


@pytest.fixture
def model():
    return RecordingChatModel(calls=[])
