"""The API's routes (`/v1/…`), one module per resource: `threads`, `runs` and `approvals`,
and `agui` for AG-UI clients (the web console's are `pes_agent.server.console`'s). Each
module's `routes(auth)` lists its paths, one `Route` per path serving all of the path's
methods through an `ApiEndpoint`."""

__all__: list[str] = []
