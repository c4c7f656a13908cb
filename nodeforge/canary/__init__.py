"""The canary deploy: a bare-metal image put on a real node of each resource class through
Ironic (allocation, deploy with a config drive, the node's own report, undeploy and cleaning)
before promote may approve it. See docs/canary.md."""
