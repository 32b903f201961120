"""A streamed answer whose terminal event ends the HTTP response.

Starlette's ``StreamingResponse`` sends each chunk with ``more_body: True`` and, once the
iterator is exhausted, a last empty message that ends the response. Behind Serve's proxy
those two travel separately (ingress replica → proxy), and a client that stops reading at
``[DONE]``, as the official ``openai`` SDK and ``llmfleet bench`` do, often closes the
connection in between: the proxy then logs "Client … disconnected, cancelling request"
for a request that succeeded (found in the soak: 198 of 735 streamed requests), and the
connection cannot be kept alive. Here the chunk that holds the terminal event is sent with
``more_body: False``, so ``[DONE]`` and the end of the response leave together.
"""

from __future__ import annotations

from starlette.responses import StreamingResponse
from starlette.types import Send

from cluster.edge_metrics import ends_stream


class SSEResponse(StreamingResponse):
    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        ended = False
        # the iterator is run to its end even after the terminal event, so that its own
        # bookkeeping (quota settlement, metrics) runs where it always did; nothing may be
        # sent after the response has ended, and nothing follows a terminal event
        async for chunk in self.body_iterator:
            if ended:
                continue
            body = chunk.encode(self.charset) if isinstance(chunk, str) else bytes(chunk)
            ended = ends_stream(body)
            await send({"type": "http.response.body", "body": body, "more_body": not ended})
        if not ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
