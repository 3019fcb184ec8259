from ..shared import NullableTypes_pb2 as _NullableTypes_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RpcClaimsIdentity(_message.Message):
    __slots__ = ("authentication_type", "name_claim_type", "role_claim_type", "claims")
    AUTHENTICATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_CLAIM_TYPE_FIELD_NUMBER: _ClassVar[int]
    ROLE_CLAIM_TYPE_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    authentication_type: _NullableTypes_pb2.NullableString
    name_claim_type: _NullableTypes_pb2.NullableString
    role_claim_type: _NullableTypes_pb2.NullableString
    claims: _containers.RepeatedCompositeFieldContainer[RpcClaim]
    def __init__(self, authentication_type: _Optional[_Union[_NullableTypes_pb2.NullableString, _Mapping]] = ..., name_claim_type: _Optional[_Union[_NullableTypes_pb2.NullableString, _Mapping]] = ..., role_claim_type: _Optional[_Union[_NullableTypes_pb2.NullableString, _Mapping]] = ..., claims: _Optional[_Iterable[_Union[RpcClaim, _Mapping]]] = ...) -> None: ...

class RpcClaim(_message.Message):
    __slots__ = ("value", "type")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    value: str
    type: str
    def __init__(self, value: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...
