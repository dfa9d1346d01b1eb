# The resp L2 adapter type (Redis, Valkey; standalone or Cluster): built with
# LMC_L2_RESP, the only part of the server that links hiredis.
lmc_l2_adapter_type(resp LMC_L2_RESP RegisterRespAdapterType
  SRCS tier/resp/resp_cluster.cc tier/resp/resp_request.cc tier/resp/resp_reply_stream.cc
       tier/resp/resp_connection.cc tier/resp/resp_adapter.cc tier/resp/resp_adapter_type.cc
  DEPS PkgConfig::HIREDIS)
