"""OpenEnv both ways: serve a registered env (`server.create_app`), consume one (`client.OpenEnvTextEnv`).

Needs the `openenv` package (`pip install 'stare-gym[interop]'`); `import envs` does not import it.
"""
