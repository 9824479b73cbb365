"""Wire formats, one codec each (OpenAI Chat Completions, Anthropic Messages) and what
they share: content parts, rendering memtap's blocks, where injected items go (placement) and
the layout of history in a chat-style message list, and reading a request without what its
agent adds that is not the user (scaffolding)."""
