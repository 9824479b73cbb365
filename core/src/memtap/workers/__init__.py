"""Background workers: threads that yield the CPU to the request path, and counting the work
handed to them so callers can wait until it is done."""
