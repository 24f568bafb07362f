"""The HTTP face: a versioned JSON API under ``/v1`` and a server-rendered dashboard at ``/``.

FastAPI's "bigger applications" layout: :mod:`.app` builds the application, :mod:`.deps`
holds the dependencies (the service context, the caller's token), :mod:`.models` the
pydantic models at the boundary, ``routers/`` one module per resource. Every route is a
few lines over a use case of :mod:`gpuplan.app`, the same ones the command line calls.
"""
