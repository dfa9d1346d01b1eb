# The fault_inject L2 adapter type: wraps another adapter and fails or delays
# a configured share of its calls.
lmc_l2_adapter_type(fault_inject ALWAYS RegisterFaultAdapterType
  SRCS tier/fault/fault_adapter.cc tier/fault/fault_adapter_type.cc)
