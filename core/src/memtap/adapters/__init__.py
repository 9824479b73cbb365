"""The patch kit provider adapters are built from: exact-undo patches, one tracked-call
wrapper, one stream observer, and all of it for Stainless-generated SDKs."""
