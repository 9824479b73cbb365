"""Conversation history: what a session said before, what a request resends, and which
sessions exist at all."""
