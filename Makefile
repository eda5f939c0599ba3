include make/cluster.mk
