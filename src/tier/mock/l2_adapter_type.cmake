# The mock L2 adapter type: objects in memory, at a configured bandwidth
# (tests, soaks, benchmarks of the L2 paths without a disk).
lmc_l2_adapter_type(mock ALWAYS RegisterMockAdapterType
  SRCS tier/mock/mock_adapter.cc tier/mock/mock_adapter_type.cc)
