"""The online buffer: transitions streamed from executors, kept in an append-only
on-disk episode log with a RAM cache for sampling (docs/architecture.md, data flow)."""
