"""The conformance suite's library: check metadata, engines, verdicts and reports.

The checks themselves are pytest tests in ``tests/conformance`` (testinfra over SSH); this
package holds what they and ``gpucluster verify`` share: the check registry (IDs and MUST
statements), the inventory view of a node, the benchmark engines (GPU burn, all-reduce,
RDMA bandwidth, pair search), per-node verdicts and the run folder's report writers.
"""
