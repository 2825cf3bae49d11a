"""Several machines: the cluster (TF_CONFIG, servers, deadlines) and collective all-reduce."""
