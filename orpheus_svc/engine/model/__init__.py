"""The Llama over the KV slot pool and its token choice, shared by the torch backend (the
eager reference), the graph engine (the same arithmetic in CUDA graphs) and the TensorRT-LLM
backend's repetition penalty: no backend's own code, so each backend folder imports this
one and never another backend's."""
