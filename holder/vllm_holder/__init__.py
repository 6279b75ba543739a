"""vllm-holder: holds the requests of scaled-to-zero vLLM services until a replica is Ready.

One pod per namespace (docs/design/scale-to-zero.md). The modules, in the order a request
meets them: config (the JSON document the operator writes, parsed), server (a listener per
service, the config followed, admin port, drain), hold (a service's queue, readiness, wake,
forwarding), forward (the upstream client), wake (the VLLMService annotation), metrics.
"""
