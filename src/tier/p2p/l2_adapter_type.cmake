# The p2p L2 adapter type: the peers of --p2p-peers as a source of the
# cascade (read only; UCX through lmc_fleet, which tier/ links already).
lmc_l2_adapter_type(p2p ALWAYS RegisterP2pAdapterType
  SRCS tier/p2p/p2p_adapter.cc tier/p2p/p2p_adapter_type.cc)
