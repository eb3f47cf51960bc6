"""The gRPC face of a bookie: ``magnetar.bookie.v1.BookieService`` over a
:class:`~bookie.ledger_storage.LedgerStorage` (the process entry point hands in the implementation).

Handlers are registered without deserializers, so request bytes reach this code as they came off the
wire and a malformed message is answered INVALID_ARGUMENT with a message saying what was wrong (gRPC's own
deserializer would fail the call with a vague INTERNAL). Responses are serialized here too. Any unexpected
exception is logged and answered INTERNAL; the server keeps serving.

AddEntries is a pipeline (:meth:`BookieService.add_pipeline`, shared with the add port of
:mod:`bookie.add_listener`): a reader task accepts each request as it arrives (validation, write cache,
journal queue: no waiting), and the response side answers them strictly in arrival order, each once its
journal group is durable. A bad request gets its own non-OK AddResponse and does not end the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import time
from typing import AsyncIterator, Callable

import grpc
from google.protobuf.message import DecodeError

import magnetar
from magnetar.proto import bookie_pb2

from .errors import InvalidRequestError
from .metrics import BookieMetrics
from .adds import INTERNAL, INVALID, OK_ANSWER, UNAVAILABLE, AddTicket
from .ledger_storage import LedgerStorage, StorageClosedError

log = logging.getLogger("bookie.service")

SERVICE_NAME = "magnetar.bookie.v1.BookieService"
PIPELINE_MAX_REQUESTS = 4096  # accepted, not yet answered, per add stream: past this it is not read
ANSWERS_PER_MESSAGE_MAX = 256  # answers in one AddResponse's ``more``
_NOTHING = object()


# Explicit ids of one ReadRequest at most (checking and answering them is work on the event loop).
READ_IDS_MAX = 1_000_000


class _Invalid(InvalidRequestError):
    """A request that cannot be served as asked (answered INVALID_ARGUMENT)."""


def _parse(cls, raw: bytes, what: str):
    try:
        return cls.FromString(raw)
    except (DecodeError, ValueError, TypeError) as err:
        raise _Invalid(f"malformed {what} ({len(raw)} bytes): {err}") from None


def _unary(fn: Callable) -> Callable:
    """Maps a unary handler's failures to gRPC statuses (and keeps the server serving)."""

    @functools.wraps(fn)
    async def handler(self: "BookieService", raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            return await fn(self, raw, context)
        except grpc.aio.AbortError:
            raise
        except _Invalid as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except StorageClosedError:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"bookie {self.bookie_id} is shutting down")
        except OSError as err:
            log.error("%s failed: %s", fn.__name__, err)
            await context.abort(grpc.StatusCode.INTERNAL, f"bookie {self.bookie_id}: storage failure: {err}")
        except Exception as err:
            log.exception("%s failed unexpectedly", fn.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"bookie {self.bookie_id}: internal error: {err!r}")

    return handler


class BookieService:
    """The servicer. ``handler()`` gives the generic handler to add to a ``grpc.aio`` server.

    Args:
        storage: the bookie's ledger storage (started).
        metrics: its metrics.
        bookie_id: reported by GetBookieInfo and in messages.
    """

    def __init__(self, storage: LedgerStorage, metrics: BookieMetrics, *, bookie_id: str) -> None:
        self.storage = storage
        self.metrics = metrics
        self.bookie_id = bookie_id
        self.closing = False
        self._add_streams: set[tuple[asyncio.Task, asyncio.Queue]] = set()

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "AddEntries": grpc.stream_stream_rpc_method_handler(self.add_entries),
                "ReadEntries": grpc.unary_stream_rpc_method_handler(self.read_entries),
                "ReadLastAddConfirmed": grpc.unary_unary_rpc_method_handler(self.read_last_add_confirmed),
                "WriteLastAddConfirmed": grpc.unary_unary_rpc_method_handler(self.write_last_add_confirmed),
                "FenceLedger": grpc.unary_unary_rpc_method_handler(self.fence_ledger),
                "DeleteLedger": grpc.unary_unary_rpc_method_handler(self.delete_ledger),
                "GetBookieInfo": grpc.unary_unary_rpc_method_handler(self.get_bookie_info),
            },
        )

    # -- AddEntries --------------------------------------------------------------------------------------

    async def add_entries(self, request_iterator, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        self.metrics.add_streams["grpc"].inc()
        # aclosing: when gRPC closes this generator (the call ended), the pipeline's own cleanup runs now.
        async with contextlib.aclosing(self.add_pipeline(request_iterator)) as responses:
            async for response in responses:
                yield response.SerializeToString()

    async def add_pipeline(self, request_iterator: AsyncIterator[bytes]) -> AsyncIterator[bookie_pb2.AddResponse]:
        """The add conversation of one stream, whatever carries it (gRPC AddEntries or the add port,
        ``bookie.add_listener``): serialized AddRequests in, their AddResponses out, in request order, answers
        that are ready together coalesced into one response's ``more``.

        A request iterator that raises (the peer went away, a framing error) ends the responses with that
        exception once everything accepted before it is answered. :meth:`drain` ends every pipeline.
        """
        pipeline: asyncio.Queue = asyncio.Queue(PIPELINE_MAX_REQUESTS)
        reader = asyncio.create_task(self._read_adds(request_iterator, pipeline), name="bookie-add-reader")
        stream = (reader, pipeline)
        self._add_streams.add(stream)
        held = _NOTHING  # an item taken while coalescing, not ready yet: the next message starts with it
        try:
            while True:
                item = held if held is not _NOTHING else await pipeline.get()
                held = _NOTHING
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                response = await self._answer(item)
                # Answers that are ready too (a journal group completes many requests at once) ride along.
                more = []
                while len(more) < ANSWERS_PER_MESSAGE_MAX and not pipeline.empty():
                    nxt = pipeline.get_nowait()
                    if nxt is None or isinstance(nxt, BaseException) or not nxt[2].settled():
                        held = nxt
                        break
                    more.append(self.add_response(nxt))
                if more:
                    response.more.extend(more)
                yield response
        finally:
            self._add_streams.discard(stream)
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _answer(self, item: tuple) -> bookie_pb2.AddResponse:
        """The AddResponse of one accepted request (waits for its entries to be durable or refused)."""
        ticket = item[2]
        if not ticket.settled():
            try:
                await ticket.waiter
            except Exception:  # noqa: BLE001 - add_response maps the failure to its answer
                pass
        return self.add_response(item)

    def add_response(self, item: tuple) -> bookie_pb2.AddResponse:
        """The AddResponse of one accepted request whose ticket is settled (``AddTicket.settled``): counted in the
        metrics once, so call it once per request."""
        request_id, received, ticket = item
        metrics = self.metrics
        status, message, entry_status = self._outcome(ticket)
        if status == 0:
            metrics.add_entries.inc(ticket.entries)
            metrics.add_bytes.inc(ticket.nbytes)
            response = bookie_pb2.AddResponse(request_id=request_id)
        else:
            if entry_status is not None:
                stored = sum(1 for s in entry_status if s == 0)
                if stored:
                    metrics.add_entries.inc(stored)
            metrics.add_requests_failed.inc()
            response = bookie_pb2.AddResponse(
                request_id=request_id, status=status, message=message, entry_status=entry_status
            )
        metrics.observe_add(time.perf_counter() - received, status == 0)
        return response

    async def drain(self, *, timeout_s: float = 5.0) -> None:
        """Shutdown: stops reading every add stream, answers what was accepted, then ends the streams (a
        client's stream stays open forever otherwise, and the server's grace period would only cut it)."""
        self.closing = True
        streams = list(self._add_streams)
        for reader, _pipeline in streams:
            reader.cancel()
        await asyncio.gather(*(reader for reader, _ in streams), return_exceptions=True)
        try:
            async with asyncio.timeout(timeout_s):
                for _reader, pipeline in streams:
                    await pipeline.put(None)  # after everything accepted so far
        except TimeoutError:
            log.warning("add streams did not drain within %.1f s", timeout_s)

    async def _read_adds(self, request_iterator, pipeline: asyncio.Queue) -> None:
        storage = self.storage
        try:
            async for raw in request_iterator:
                received = time.perf_counter()
                await storage.wait_for_room()
                await pipeline.put(self.accept_add(raw, received))
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the stream itself failed (client went away): end the response side
            await pipeline.put(err)
            return
        await pipeline.put(None)

    def accept_add(self, raw: bytes, received: float) -> tuple[int, float, AddTicket]:
        """Accepts one serialized AddRequest without waiting (call it once the storage has room):
        ``(request_id, received, ticket)``, the item :meth:`add_response` answers once the ticket is settled.
        A malformed request, a shutting-down bookie or an unexpected failure is a ticket with its answer."""
        try:
            request = bookie_pb2.AddRequest.FromString(raw)
        except (DecodeError, ValueError, TypeError) as err:
            return (0, received, AddTicket((INVALID, f"malformed AddRequest ({len(raw)} bytes): {err}", None)))
        if self.closing:
            return (request.request_id, received,
                    AddTicket((UNAVAILABLE, f"bookie {self.bookie_id} is shutting down", None)))
        try:
            ticket = self.storage.add(request, raw)
        except Exception as err:
            log.exception("add request %d failed unexpectedly", request.request_id)
            ticket = AddTicket((INTERNAL, f"bookie {self.bookie_id}: internal error: {err!r}", None))
        return (request.request_id, received, ticket)

    def _outcome(self, ticket: AddTicket):
        """The answer of a settled ticket: its own, or what its waiter's result or failure means."""
        if ticket.answer is not None:
            return ticket.answer
        result = None
        if ticket.waiter is not None:
            try:
                result = ticket.waiter.result()
            except (StorageClosedError, asyncio.CancelledError):
                return (UNAVAILABLE, f"bookie {self.bookie_id} is shutting down", None)
            except OSError as err:
                return (INTERNAL, f"bookie {self.bookie_id}: journal failure: {err}", None)
            except Exception as err:
                log.exception("add failed unexpectedly")
                return (INTERNAL, f"bookie {self.bookie_id}: internal error: {err!r}", None)
        if result is None:
            return ticket.then or OK_ANSWER
        return result

    # -- ReadEntries -------------------------------------------------------------------------------------

    async def read_entries(self, raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        started = time.perf_counter()
        served = False  # every entry answered OK or NO_SUCH_ENTRY (an answer, not a failure)
        try:
            request = _parse(bookie_pb2.ReadRequest, raw, "ReadRequest")
            ledger_id = request.ledger_id
            ids = list(request.entry_ids)
            has_first, has_last = request.HasField("first_entry_id"), request.HasField("last_entry_id")
            if ids:
                if len(ids) > READ_IDS_MAX:
                    raise _Invalid(f"{len(ids)} entry_ids in one ReadRequest; at most {READ_IDS_MAX}")
                if has_first or has_last:
                    raise _Invalid("give either entry_ids or first_entry_id/last_entry_id, not both")
                for a, b in zip(ids, ids[1:]):
                    if b <= a:
                        raise _Invalid(f"entry_ids must be strictly ascending: {b} follows {a}")
            elif not (has_first and has_last):
                raise _Invalid("a ReadRequest needs entry_ids, or both first_entry_id and last_entry_id")
            elif request.first_entry_id > request.last_entry_id:
                raise _Invalid(
                    f"first_entry_id {request.first_entry_id} > last_entry_id {request.last_entry_id}"
                )
            if self.closing:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"bookie {self.bookie_id} is shutting down")
            if request.fence:
                await self.storage.fence(ledger_id)
            if not ids:
                ids = self._clamp_range(ledger_id, request.first_entry_id, request.last_entry_id)
            count = nbytes = 0
            internal = False
            async for chunk in self.storage.read_entries(ledger_id, ids):
                explicit = self.storage.explicit_lac(ledger_id)
                entries = []
                for r in chunk:
                    entries.append(bookie_pb2.ReadEntry(
                        entry_id=r.entry_id, status=r.status, last_add_confirmed=max(r.last_add_confirmed, explicit),
                        payload=r.payload,
                    ))
                    if r.status == 0:
                        count += 1
                        nbytes += len(r.payload)
                    elif r.status == INTERNAL:
                        internal = True
                yield bookie_pb2.ReadResponse(ledger_id=ledger_id, entries=entries).SerializeToString()
            self.metrics.read_entries.inc(count)
            self.metrics.read_bytes.inc(nbytes)
            served = not internal
        except grpc.aio.AbortError:
            raise
        except _Invalid as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except StorageClosedError:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"bookie {self.bookie_id} is shutting down")
        except OSError as err:
            log.error("read failed: %s", err)
            await context.abort(grpc.StatusCode.INTERNAL, f"bookie {self.bookie_id}: storage failure: {err}")
        except Exception as err:
            log.exception("read failed unexpectedly")
            await context.abort(grpc.StatusCode.INTERNAL, f"bookie {self.bookie_id}: internal error: {err!r}")
        finally:
            # Refused, failed, or abandoned by the client (the generator closed early) counts as failed.
            self.metrics.observe_read(time.perf_counter() - started, served)

    def _clamp_range(self, ledger_id: int, first: int, last: int) -> range:
        """The ids a range read answers: the range, cut just past the highest entry this bookie holds.

        A range read therefore ends with at most one NO_SUCH_ENTRY beyond the bookie's last entry instead of
        one per id of an open-ended range (``last`` may be huge when a reader probes ahead).
        """
        highest = self.storage.read_lac(ledger_id).last_entry_id
        stop = min(last, max(first, highest + 1))
        return range(first, stop + 1)

    # -- unary calls -------------------------------------------------------------------------------------

    def _lac_response(self, ledger_id: int, info) -> bytes:
        return bookie_pb2.ReadLacResponse(
            ledger_id=ledger_id, last_add_confirmed=info.last_add_confirmed, last_entry_id=info.last_entry_id,
            fenced=info.fenced, known=info.known,
        ).SerializeToString()

    def _check_serving(self) -> None:
        if self.closing:
            raise StorageClosedError("shutting down")

    @_unary
    async def read_last_add_confirmed(self, raw: bytes, context) -> bytes:
        request = _parse(bookie_pb2.ReadLacRequest, raw, "ReadLacRequest")
        self._check_serving()
        return self._lac_response(request.ledger_id, self.storage.read_lac(request.ledger_id))

    @_unary
    async def write_last_add_confirmed(self, raw: bytes, context) -> bytes:
        request = _parse(bookie_pb2.WriteLacRequest, raw, "WriteLacRequest")
        if request.last_add_confirmed < -1:
            raise _Invalid(f"last_add_confirmed {request.last_add_confirmed} of ledger {request.ledger_id}: "
                           "the lowest LAC is -1 (nothing confirmed)")
        self._check_serving()
        return self._lac_response(request.ledger_id,
                                  self.storage.write_lac(request.ledger_id, request.last_add_confirmed))

    @_unary
    async def fence_ledger(self, raw: bytes, context) -> bytes:
        request = _parse(bookie_pb2.FenceRequest, raw, "FenceRequest")
        self._check_serving()
        info = await self.storage.fence(request.ledger_id)
        log.info("ledger %d fenced (lac %d, last entry %d)", request.ledger_id, info.last_add_confirmed,
                 info.last_entry_id)
        return self._lac_response(request.ledger_id, info)

    @_unary
    async def delete_ledger(self, raw: bytes, context) -> bytes:
        request = _parse(bookie_pb2.DeleteLedgerRequest, raw, "DeleteLedgerRequest")
        self._check_serving()
        existed = await self.storage.delete_ledger(request.ledger_id)
        if existed:
            log.info("ledger %d deleted", request.ledger_id)
        return bookie_pb2.DeleteLedgerResponse(existed=existed).SerializeToString()

    @_unary
    async def get_bookie_info(self, raw: bytes, context) -> bytes:
        _parse(bookie_pb2.BookieInfoRequest, raw, "BookieInfoRequest")
        usage = shutil.disk_usage(self.storage.data_dir)
        return bookie_pb2.BookieInfoResponse(
            bookie_id=self.bookie_id,
            read_only=self.storage.read_only,
            free_disk_bytes=usage.free,
            total_disk_bytes=usage.total,
            ledger_count=self.storage.ledger_count,
            version=magnetar.__version__,
            entry_max_size_bytes=self.storage.entry_max_size_bytes,
        ).SerializeToString()
