"""The ``torch.compile`` seams (``neuron``, ``neuron_libtorch``, the capture seam, the native
seam), the precompile hook, Dynamo's graph-break hooks, the device helpers and debug artifacts."""
