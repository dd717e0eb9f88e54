"""The OpenEnv environment around the evaluator: wire models, returns, client, and the server.

Client side (what the trainer and flows import; no evaluator code): `kernelflow.env.models`
(`KernelAction`, `KernelObservation`, `KernelState`), `kernelflow.env.client` (`KernelEnvSession`,
`AsyncKernelEnvSession`, `KernelEnvClient`, `fetch_server_info`), `kernelflow.env.returns`.
Server side: `kernelflow.env.config.EnvServerConfig` and `kernelflow.env.server`. Importing this
package imports none of them.
"""
