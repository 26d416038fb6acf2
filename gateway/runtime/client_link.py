"""The client link lives in gateway.client_link, shared by the fronts and the
runtime (the fronts may not import the runtime); its names stay importable
from here for the runtime's modules."""

from gateway.client_link import CURRENT_REQUEST, ClientLink, ForwardedServerRequest, InflightCall

__all__ = ["CURRENT_REQUEST", "ClientLink", "ForwardedServerRequest", "InflightCall"]
