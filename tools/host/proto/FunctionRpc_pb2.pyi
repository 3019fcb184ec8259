from google.protobuf import duration_pb2 as _duration_pb2
from .identity import ClaimsIdentityRpc_pb2 as _ClaimsIdentityRpc_pb2
from .shared import NullableTypes_pb2 as _NullableTypes_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RpcDataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    unknown: _ClassVar[RpcDataType]
    string: _ClassVar[RpcDataType]
    json: _ClassVar[RpcDataType]
    bytes: _ClassVar[RpcDataType]
    stream: _ClassVar[RpcDataType]
    http: _ClassVar[RpcDataType]
    int: _ClassVar[RpcDataType]
    double: _ClassVar[RpcDataType]
    collection_bytes: _ClassVar[RpcDataType]
    collection_string: _ClassVar[RpcDataType]
    collection_double: _ClassVar[RpcDataType]
    collection_sint64: _ClassVar[RpcDataType]
unknown: RpcDataType
string: RpcDataType
json: RpcDataType
bytes: RpcDataType
stream: RpcDataType
http: RpcDataType
int: RpcDataType
double: RpcDataType
collection_bytes: RpcDataType
collection_string: RpcDataType
collection_double: RpcDataType
collection_sint64: RpcDataType

class StreamingMessage(_message.Message):
    __slots__ = ("request_id", "start_stream", "worker_init_request", "worker_init_response", "worker_heartbeat", "worker_terminate", "worker_status_request", "worker_status_response", "file_change_event_request", "worker_action_response", "function_load_request", "function_load_response", "invocation_request", "invocation_response", "invocation_cancel", "rpc_log", "function_environment_reload_request", "function_environment_reload_response", "close_shared_memory_resources_request", "close_shared_memory_resources_response", "functions_metadata_request", "function_metadata_response", "function_load_request_collection", "function_load_response_collection", "worker_warmup_request", "worker_warmup_response")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    START_STREAM_FIELD_NUMBER: _ClassVar[int]
    WORKER_INIT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    WORKER_INIT_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    WORKER_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    WORKER_TERMINATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_STATUS_REQUEST_FIELD_NUMBER: _ClassVar[int]
    WORKER_STATUS_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FILE_CHANGE_EVENT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    WORKER_ACTION_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_LOAD_REQUEST_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_LOAD_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_REQUEST_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_CANCEL_FIELD_NUMBER: _ClassVar[int]
    RPC_LOG_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_ENVIRONMENT_RELOAD_REQUEST_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_ENVIRONMENT_RELOAD_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SHARED_MEMORY_RESOURCES_REQUEST_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SHARED_MEMORY_RESOURCES_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FUNCTIONS_METADATA_REQUEST_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_METADATA_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_LOAD_REQUEST_COLLECTION_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_LOAD_RESPONSE_COLLECTION_FIELD_NUMBER: _ClassVar[int]
    WORKER_WARMUP_REQUEST_FIELD_NUMBER: _ClassVar[int]
    WORKER_WARMUP_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    start_stream: StartStream
    worker_init_request: WorkerInitRequest
    worker_init_response: WorkerInitResponse
    worker_heartbeat: WorkerHeartbeat
    worker_terminate: WorkerTerminate
    worker_status_request: WorkerStatusRequest
    worker_status_response: WorkerStatusResponse
    file_change_event_request: FileChangeEventRequest
    worker_action_response: WorkerActionResponse
    function_load_request: FunctionLoadRequest
    function_load_response: FunctionLoadResponse
    invocation_request: InvocationRequest
    invocation_response: InvocationResponse
    invocation_cancel: InvocationCancel
    rpc_log: RpcLog
    function_environment_reload_request: FunctionEnvironmentReloadRequest
    function_environment_reload_response: FunctionEnvironmentReloadResponse
    close_shared_memory_resources_request: CloseSharedMemoryResourcesRequest
    close_shared_memory_resources_response: CloseSharedMemoryResourcesResponse
    functions_metadata_request: FunctionsMetadataRequest
    function_metadata_response: FunctionMetadataResponse
    function_load_request_collection: FunctionLoadRequestCollection
    function_load_response_collection: FunctionLoadResponseCollection
    worker_warmup_request: WorkerWarmupRequest
    worker_warmup_response: WorkerWarmupResponse
    def __init__(self, request_id: _Optional[str] = ..., start_stream: _Optional[_Union[StartStream, _Mapping]] = ..., worker_init_request: _Optional[_Union[WorkerInitRequest, _Mapping]] = ..., worker_init_response: _Optional[_Union[WorkerInitResponse, _Mapping]] = ..., worker_heartbeat: _Optional[_Union[WorkerHeartbeat, _Mapping]] = ..., worker_terminate: _Optional[_Union[WorkerTerminate, _Mapping]] = ..., worker_status_request: _Optional[_Union[WorkerStatusRequest, _Mapping]] = ..., worker_status_response: _Optional[_Union[WorkerStatusResponse, _Mapping]] = ..., file_change_event_request: _Optional[_Union[FileChangeEventRequest, _Mapping]] = ..., worker_action_response: _Optional[_Union[WorkerActionResponse, _Mapping]] = ..., function_load_request: _Optional[_Union[FunctionLoadRequest, _Mapping]] = ..., function_load_response: _Optional[_Union[FunctionLoadResponse, _Mapping]] = ..., invocation_request: _Optional[_Union[InvocationRequest, _Mapping]] = ..., invocation_response: _Optional[_Union[InvocationResponse, _Mapping]] = ..., invocation_cancel: _Optional[_Union[InvocationCancel, _Mapping]] = ..., rpc_log: _Optional[_Union[RpcLog, _Mapping]] = ..., function_environment_reload_request: _Optional[_Union[FunctionEnvironmentReloadRequest, _Mapping]] = ..., function_environment_reload_response: _Optional[_Union[FunctionEnvironmentReloadResponse, _Mapping]] = ..., close_shared_memory_resources_request: _Optional[_Union[CloseSharedMemoryResourcesRequest, _Mapping]] = ..., close_shared_memory_resources_response: _Optional[_Union[CloseSharedMemoryResourcesResponse, _Mapping]] = ..., functions_metadata_request: _Optional[_Union[FunctionsMetadataRequest, _Mapping]] = ..., function_metadata_response: _Optional[_Union[FunctionMetadataResponse, _Mapping]] = ..., function_load_request_collection: _Optional[_Union[FunctionLoadRequestCollection, _Mapping]] = ..., function_load_response_collection: _Optional[_Union[FunctionLoadResponseCollection, _Mapping]] = ..., worker_warmup_request: _Optional[_Union[WorkerWarmupRequest, _Mapping]] = ..., worker_warmup_response: _Optional[_Union[WorkerWarmupResponse, _Mapping]] = ...) -> None: ...

class StartStream(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class WorkerInitRequest(_message.Message):
    __slots__ = ("host_version", "capabilities", "log_categories", "worker_directory", "function_app_directory")
    class CapabilitiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LogCategoriesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: RpcLog.Level
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[RpcLog.Level, str]] = ...) -> None: ...
    HOST_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    LOG_CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    WORKER_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_APP_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    host_version: str
    capabilities: _containers.ScalarMap[str, str]
    log_categories: _containers.ScalarMap[str, RpcLog.Level]
    worker_directory: str
    function_app_directory: str
    def __init__(self, host_version: _Optional[str] = ..., capabilities: _Optional[_Mapping[str, str]] = ..., log_categories: _Optional[_Mapping[str, RpcLog.Level]] = ..., worker_directory: _Optional[str] = ..., function_app_directory: _Optional[str] = ...) -> None: ...

class WorkerInitResponse(_message.Message):
    __slots__ = ("worker_version", "capabilities", "result", "worker_metadata")
    class CapabilitiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    WORKER_METADATA_FIELD_NUMBER: _ClassVar[int]
    worker_version: str
    capabilities: _containers.ScalarMap[str, str]
    result: StatusResult
    worker_metadata: WorkerMetadata
    def __init__(self, worker_version: _Optional[str] = ..., capabilities: _Optional[_Mapping[str, str]] = ..., result: _Optional[_Union[StatusResult, _Mapping]] = ..., worker_metadata: _Optional[_Union[WorkerMetadata, _Mapping]] = ...) -> None: ...

class WorkerMetadata(_message.Message):
    __slots__ = ("runtime_name", "runtime_version", "worker_version", "worker_bitness", "custom_properties")
    class CustomPropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUNTIME_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    WORKER_VERSION_FIELD_NUMBER: _ClassVar[int]
    WORKER_BITNESS_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    runtime_name: str
    runtime_version: str
    worker_version: str
    worker_bitness: str
    custom_properties: _containers.ScalarMap[str, str]
    def __init__(self, runtime_name: _Optional[str] = ..., runtime_version: _Optional[str] = ..., worker_version: _Optional[str] = ..., worker_bitness: _Optional[str] = ..., custom_properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class StatusResult(_message.Message):
    __slots__ = ("status", "result", "exception", "logs")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Failure: _ClassVar[StatusResult.Status]
        Success: _ClassVar[StatusResult.Status]
        Cancelled: _ClassVar[StatusResult.Status]
    Failure: StatusResult.Status
    Success: StatusResult.Status
    Cancelled: StatusResult.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    status: StatusResult.Status
    result: str
    exception: RpcException
    logs: _containers.RepeatedCompositeFieldContainer[RpcLog]
    def __init__(self, status: _Optional[_Union[StatusResult.Status, str]] = ..., result: _Optional[str] = ..., exception: _Optional[_Union[RpcException, _Mapping]] = ..., logs: _Optional[_Iterable[_Union[RpcLog, _Mapping]]] = ...) -> None: ...

class WorkerHeartbeat(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerTerminate(_message.Message):
    __slots__ = ("grace_period",)
    GRACE_PERIOD_FIELD_NUMBER: _ClassVar[int]
    grace_period: _duration_pb2.Duration
    def __init__(self, grace_period: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class FileChangeEventRequest(_message.Message):
    __slots__ = ("type", "full_path", "name")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Unknown: _ClassVar[FileChangeEventRequest.Type]
        Created: _ClassVar[FileChangeEventRequest.Type]
        Deleted: _ClassVar[FileChangeEventRequest.Type]
        Changed: _ClassVar[FileChangeEventRequest.Type]
        Renamed: _ClassVar[FileChangeEventRequest.Type]
        All: _ClassVar[FileChangeEventRequest.Type]
    Unknown: FileChangeEventRequest.Type
    Created: FileChangeEventRequest.Type
    Deleted: FileChangeEventRequest.Type
    Changed: FileChangeEventRequest.Type
    Renamed: FileChangeEventRequest.Type
    All: FileChangeEventRequest.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FULL_PATH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    type: FileChangeEventRequest.Type
    full_path: str
    name: str
    def __init__(self, type: _Optional[_Union[FileChangeEventRequest.Type, str]] = ..., full_path: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class WorkerActionResponse(_message.Message):
    __slots__ = ("action", "reason")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Restart: _ClassVar[WorkerActionResponse.Action]
        Reload: _ClassVar[WorkerActionResponse.Action]
    Restart: WorkerActionResponse.Action
    Reload: WorkerActionResponse.Action
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    action: WorkerActionResponse.Action
    reason: str
    def __init__(self, action: _Optional[_Union[WorkerActionResponse.Action, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class WorkerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerStatusResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FunctionEnvironmentReloadRequest(_message.Message):
    __slots__ = ("environment_variables", "function_app_directory")
    class EnvironmentVariablesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENVIRONMENT_VARIABLES_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_APP_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    environment_variables: _containers.ScalarMap[str, str]
    function_app_directory: str
    def __init__(self, environment_variables: _Optional[_Mapping[str, str]] = ..., function_app_directory: _Optional[str] = ...) -> None: ...

class FunctionEnvironmentReloadResponse(_message.Message):
    __slots__ = ("worker_metadata", "capabilities", "result", "capabilities_update_strategy")
    class CapabilitiesUpdateStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        merge: _ClassVar[FunctionEnvironmentReloadResponse.CapabilitiesUpdateStrategy]
        replace: _ClassVar[FunctionEnvironmentReloadResponse.CapabilitiesUpdateStrategy]
    merge: FunctionEnvironmentReloadResponse.CapabilitiesUpdateStrategy
    replace: FunctionEnvironmentReloadResponse.CapabilitiesUpdateStrategy
    class CapabilitiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_METADATA_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_UPDATE_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    worker_metadata: WorkerMetadata
    capabilities: _containers.ScalarMap[str, str]
    result: StatusResult
    capabilities_update_strategy: FunctionEnvironmentReloadResponse.CapabilitiesUpdateStrategy
    def __init__(self, worker_metadata: _Optional[_Union[WorkerMetadata, _Mapping]] = ..., capabilities: _Optional[_Mapping[str, str]] = ..., result: _Optional[_Union[StatusResult, _Mapping]] = ..., capabilities_update_strategy: _Optional[_Union[FunctionEnvironmentReloadResponse.CapabilitiesUpdateStrategy, str]] = ...) -> None: ...

class CloseSharedMemoryResourcesRequest(_message.Message):
    __slots__ = ("map_names",)
    MAP_NAMES_FIELD_NUMBER: _ClassVar[int]
    map_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, map_names: _Optional[_Iterable[str]] = ...) -> None: ...

class CloseSharedMemoryResourcesResponse(_message.Message):
    __slots__ = ("close_map_results",)
    class CloseMapResultsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bool
        def __init__(self, key: _Optional[str] = ..., value: bool = ...) -> None: ...
    CLOSE_MAP_RESULTS_FIELD_NUMBER: _ClassVar[int]
    close_map_results: _containers.ScalarMap[str, bool]
    def __init__(self, close_map_results: _Optional[_Mapping[str, bool]] = ...) -> None: ...

class FunctionLoadRequestCollection(_message.Message):
    __slots__ = ("function_load_requests",)
    FUNCTION_LOAD_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    function_load_requests: _containers.RepeatedCompositeFieldContainer[FunctionLoadRequest]
    def __init__(self, function_load_requests: _Optional[_Iterable[_Union[FunctionLoadRequest, _Mapping]]] = ...) -> None: ...

class FunctionLoadResponseCollection(_message.Message):
    __slots__ = ("function_load_responses",)
    FUNCTION_LOAD_RESPONSES_FIELD_NUMBER: _ClassVar[int]
    function_load_responses: _containers.RepeatedCompositeFieldContainer[FunctionLoadResponse]
    def __init__(self, function_load_responses: _Optional[_Iterable[_Union[FunctionLoadResponse, _Mapping]]] = ...) -> None: ...

class FunctionLoadRequest(_message.Message):
    __slots__ = ("function_id", "metadata", "managed_dependency_enabled")
    FUNCTION_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MANAGED_DEPENDENCY_ENABLED_FIELD_NUMBER: _ClassVar[int]
    function_id: str
    metadata: RpcFunctionMetadata
    managed_dependency_enabled: bool
    def __init__(self, function_id: _Optional[str] = ..., metadata: _Optional[_Union[RpcFunctionMetadata, _Mapping]] = ..., managed_dependency_enabled: bool = ...) -> None: ...

class FunctionLoadResponse(_message.Message):
    __slots__ = ("function_id", "result", "is_dependency_downloaded")
    FUNCTION_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    IS_DEPENDENCY_DOWNLOADED_FIELD_NUMBER: _ClassVar[int]
    function_id: str
    result: StatusResult
    is_dependency_downloaded: bool
    def __init__(self, function_id: _Optional[str] = ..., result: _Optional[_Union[StatusResult, _Mapping]] = ..., is_dependency_downloaded: bool = ...) -> None: ...

class RpcFunctionMetadata(_message.Message):
    __slots__ = ("name", "directory", "script_file", "entry_point", "bindings", "is_proxy", "status", "language", "raw_bindings", "function_id", "managed_dependency_enabled", "retry_options", "properties")
    class BindingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: BindingInfo
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[BindingInfo, _Mapping]] = ...) -> None: ...
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_FILE_FIELD_NUMBER: _ClassVar[int]
    ENTRY_POINT_FIELD_NUMBER: _ClassVar[int]
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    IS_PROXY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    RAW_BINDINGS_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_ID_FIELD_NUMBER: _ClassVar[int]
    MANAGED_DEPENDENCY_ENABLED_FIELD_NUMBER: _ClassVar[int]
    RETRY_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    directory: str
    script_file: str
    entry_point: str
    bindings: _containers.MessageMap[str, BindingInfo]
    is_proxy: bool
    status: StatusResult
    language: str
    raw_bindings: _containers.RepeatedScalarFieldContainer[str]
    function_id: str
    managed_dependency_enabled: bool
    retry_options: RpcRetryOptions
    properties: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., directory: _Optional[str] = ..., script_file: _Optional[str] = ..., entry_point: _Optional[str] = ..., bindings: _Optional[_Mapping[str, BindingInfo]] = ..., is_proxy: bool = ..., status: _Optional[_Union[StatusResult, _Mapping]] = ..., language: _Optional[str] = ..., raw_bindings: _Optional[_Iterable[str]] = ..., function_id: _Optional[str] = ..., managed_dependency_enabled: bool = ..., retry_options: _Optional[_Union[RpcRetryOptions, _Mapping]] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class FunctionsMetadataRequest(_message.Message):
    __slots__ = ("function_app_directory",)
    FUNCTION_APP_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    function_app_directory: str
    def __init__(self, function_app_directory: _Optional[str] = ...) -> None: ...

class FunctionMetadataResponse(_message.Message):
    __slots__ = ("function_metadata_results", "result", "use_default_metadata_indexing")
    FUNCTION_METADATA_RESULTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    USE_DEFAULT_METADATA_INDEXING_FIELD_NUMBER: _ClassVar[int]
    function_metadata_results: _containers.RepeatedCompositeFieldContainer[RpcFunctionMetadata]
    result: StatusResult
    use_default_metadata_indexing: bool
    def __init__(self, function_metadata_results: _Optional[_Iterable[_Union[RpcFunctionMetadata, _Mapping]]] = ..., result: _Optional[_Union[StatusResult, _Mapping]] = ..., use_default_metadata_indexing: bool = ...) -> None: ...

class InvocationRequest(_message.Message):
    __slots__ = ("invocation_id", "function_id", "input_data", "trigger_metadata", "trace_context", "retry_context")
    class TriggerMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TypedData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TypedData, _Mapping]] = ...) -> None: ...
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_DATA_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_METADATA_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    RETRY_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    function_id: str
    input_data: _containers.RepeatedCompositeFieldContainer[ParameterBinding]
    trigger_metadata: _containers.MessageMap[str, TypedData]
    trace_context: RpcTraceContext
    retry_context: RetryContext
    def __init__(self, invocation_id: _Optional[str] = ..., function_id: _Optional[str] = ..., input_data: _Optional[_Iterable[_Union[ParameterBinding, _Mapping]]] = ..., trigger_metadata: _Optional[_Mapping[str, TypedData]] = ..., trace_context: _Optional[_Union[RpcTraceContext, _Mapping]] = ..., retry_context: _Optional[_Union[RetryContext, _Mapping]] = ...) -> None: ...

class RpcTraceContext(_message.Message):
    __slots__ = ("trace_parent", "trace_state", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TRACE_PARENT_FIELD_NUMBER: _ClassVar[int]
    TRACE_STATE_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    trace_parent: str
    trace_state: str
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, trace_parent: _Optional[str] = ..., trace_state: _Optional[str] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RetryContext(_message.Message):
    __slots__ = ("retry_count", "max_retry_count", "exception")
    RETRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    retry_count: int
    max_retry_count: int
    exception: RpcException
    def __init__(self, retry_count: _Optional[int] = ..., max_retry_count: _Optional[int] = ..., exception: _Optional[_Union[RpcException, _Mapping]] = ...) -> None: ...

class InvocationCancel(_message.Message):
    __slots__ = ("invocation_id", "grace_period")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    GRACE_PERIOD_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    grace_period: _duration_pb2.Duration
    def __init__(self, invocation_id: _Optional[str] = ..., grace_period: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class InvocationResponse(_message.Message):
    __slots__ = ("invocation_id", "output_data", "return_value", "result")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DATA_FIELD_NUMBER: _ClassVar[int]
    RETURN_VALUE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    output_data: _containers.RepeatedCompositeFieldContainer[ParameterBinding]
    return_value: TypedData
    result: StatusResult
    def __init__(self, invocation_id: _Optional[str] = ..., output_data: _Optional[_Iterable[_Union[ParameterBinding, _Mapping]]] = ..., return_value: _Optional[_Union[TypedData, _Mapping]] = ..., result: _Optional[_Union[StatusResult, _Mapping]] = ...) -> None: ...

class WorkerWarmupRequest(_message.Message):
    __slots__ = ("worker_directory",)
    WORKER_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    worker_directory: str
    def __init__(self, worker_directory: _Optional[str] = ...) -> None: ...

class WorkerWarmupResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: StatusResult
    def __init__(self, result: _Optional[_Union[StatusResult, _Mapping]] = ...) -> None: ...

class TypedData(_message.Message):
    __slots__ = ("string", "json", "bytes", "stream", "http", "int", "double", "collection_bytes", "collection_string", "collection_double", "collection_sint64", "model_binding_data", "collection_model_binding_data")
    STRING_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    INT_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_STRING_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_DOUBLE_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_SINT64_FIELD_NUMBER: _ClassVar[int]
    MODEL_BINDING_DATA_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_MODEL_BINDING_DATA_FIELD_NUMBER: _ClassVar[int]
    string: str
    json: str
    bytes: bytes
    stream: bytes
    http: RpcHttp
    int: int
    double: float
    collection_bytes: CollectionBytes
    collection_string: CollectionString
    collection_double: CollectionDouble
    collection_sint64: CollectionSInt64
    model_binding_data: ModelBindingData
    collection_model_binding_data: CollectionModelBindingData
    def __init__(self, string: _Optional[str] = ..., json: _Optional[str] = ..., bytes: _Optional[bytes] = ..., stream: _Optional[bytes] = ..., http: _Optional[_Union[RpcHttp, _Mapping]] = ..., int: _Optional[int] = ..., double: _Optional[float] = ..., collection_bytes: _Optional[_Union[CollectionBytes, _Mapping]] = ..., collection_string: _Optional[_Union[CollectionString, _Mapping]] = ..., collection_double: _Optional[_Union[CollectionDouble, _Mapping]] = ..., collection_sint64: _Optional[_Union[CollectionSInt64, _Mapping]] = ..., model_binding_data: _Optional[_Union[ModelBindingData, _Mapping]] = ..., collection_model_binding_data: _Optional[_Union[CollectionModelBindingData, _Mapping]] = ...) -> None: ...

class RpcSharedMemory(_message.Message):
    __slots__ = ("name", "offset", "count", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    offset: int
    count: int
    type: RpcDataType
    def __init__(self, name: _Optional[str] = ..., offset: _Optional[int] = ..., count: _Optional[int] = ..., type: _Optional[_Union[RpcDataType, str]] = ...) -> None: ...

class CollectionString(_message.Message):
    __slots__ = ("string",)
    STRING_FIELD_NUMBER: _ClassVar[int]
    string: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, string: _Optional[_Iterable[str]] = ...) -> None: ...

class CollectionBytes(_message.Message):
    __slots__ = ("bytes",)
    BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, bytes: _Optional[_Iterable[bytes]] = ...) -> None: ...

class CollectionDouble(_message.Message):
    __slots__ = ("double",)
    DOUBLE_FIELD_NUMBER: _ClassVar[int]
    double: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, double: _Optional[_Iterable[float]] = ...) -> None: ...

class CollectionSInt64(_message.Message):
    __slots__ = ("sint64",)
    SINT64_FIELD_NUMBER: _ClassVar[int]
    sint64: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, sint64: _Optional[_Iterable[int]] = ...) -> None: ...

class ParameterBinding(_message.Message):
    __slots__ = ("name", "data", "rpc_shared_memory")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    RPC_SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
    name: str
    data: TypedData
    rpc_shared_memory: RpcSharedMemory
    def __init__(self, name: _Optional[str] = ..., data: _Optional[_Union[TypedData, _Mapping]] = ..., rpc_shared_memory: _Optional[_Union[RpcSharedMemory, _Mapping]] = ...) -> None: ...

class BindingInfo(_message.Message):
    __slots__ = ("type", "direction", "data_type", "properties")
    class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        out: _ClassVar[BindingInfo.Direction]
        inout: _ClassVar[BindingInfo.Direction]
    out: BindingInfo.Direction
    inout: BindingInfo.Direction
    class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        undefined: _ClassVar[BindingInfo.DataType]
        string: _ClassVar[BindingInfo.DataType]
        binary: _ClassVar[BindingInfo.DataType]
        stream: _ClassVar[BindingInfo.DataType]
    undefined: BindingInfo.DataType
    string: BindingInfo.DataType
    binary: BindingInfo.DataType
    stream: BindingInfo.DataType
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    type: str
    direction: BindingInfo.Direction
    data_type: BindingInfo.DataType
    properties: _containers.ScalarMap[str, str]
    def __init__(self, type: _Optional[str] = ..., direction: _Optional[_Union[BindingInfo.Direction, str]] = ..., data_type: _Optional[_Union[BindingInfo.DataType, str]] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RpcLog(_message.Message):
    __slots__ = ("invocation_id", "category", "level", "message", "event_id", "exception", "properties", "log_category", "propertiesMap")
    class Level(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Trace: _ClassVar[RpcLog.Level]
        Debug: _ClassVar[RpcLog.Level]
        Information: _ClassVar[RpcLog.Level]
        Warning: _ClassVar[RpcLog.Level]
        Error: _ClassVar[RpcLog.Level]
        Critical: _ClassVar[RpcLog.Level]
    Trace: RpcLog.Level
    Debug: RpcLog.Level
    Information: RpcLog.Level
    Warning: RpcLog.Level
    Error: RpcLog.Level
    Critical: RpcLog.Level
    class RpcLogCategory(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        User: _ClassVar[RpcLog.RpcLogCategory]
        System: _ClassVar[RpcLog.RpcLogCategory]
        CustomMetric: _ClassVar[RpcLog.RpcLogCategory]
    User: RpcLog.RpcLogCategory
    System: RpcLog.RpcLogCategory
    CustomMetric: RpcLog.RpcLogCategory
    class PropertiesMapEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TypedData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TypedData, _Mapping]] = ...) -> None: ...
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    LOG_CATEGORY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIESMAP_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    category: str
    level: RpcLog.Level
    message: str
    event_id: str
    exception: RpcException
    properties: str
    log_category: RpcLog.RpcLogCategory
    propertiesMap: _containers.MessageMap[str, TypedData]
    def __init__(self, invocation_id: _Optional[str] = ..., category: _Optional[str] = ..., level: _Optional[_Union[RpcLog.Level, str]] = ..., message: _Optional[str] = ..., event_id: _Optional[str] = ..., exception: _Optional[_Union[RpcException, _Mapping]] = ..., properties: _Optional[str] = ..., log_category: _Optional[_Union[RpcLog.RpcLogCategory, str]] = ..., propertiesMap: _Optional[_Mapping[str, TypedData]] = ...) -> None: ...

class RpcException(_message.Message):
    __slots__ = ("source", "stack_trace", "message", "is_user_exception", "type")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STACK_TRACE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    IS_USER_EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    source: str
    stack_trace: str
    message: str
    is_user_exception: bool
    type: str
    def __init__(self, source: _Optional[str] = ..., stack_trace: _Optional[str] = ..., message: _Optional[str] = ..., is_user_exception: bool = ..., type: _Optional[str] = ...) -> None: ...

class RpcHttpCookie(_message.Message):
    __slots__ = ("name", "value", "domain", "path", "expires", "secure", "http_only", "same_site", "max_age")
    class SameSite(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        Lax: _ClassVar[RpcHttpCookie.SameSite]
        Strict: _ClassVar[RpcHttpCookie.SameSite]
        ExplicitNone: _ClassVar[RpcHttpCookie.SameSite]
    Lax: RpcHttpCookie.SameSite
    Strict: RpcHttpCookie.SameSite
    ExplicitNone: RpcHttpCookie.SameSite
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    SECURE_FIELD_NUMBER: _ClassVar[int]
    HTTP_ONLY_FIELD_NUMBER: _ClassVar[int]
    SAME_SITE_FIELD_NUMBER: _ClassVar[int]
    MAX_AGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    domain: _NullableTypes_pb2.NullableString
    path: _NullableTypes_pb2.NullableString
    expires: _NullableTypes_pb2.NullableTimestamp
    secure: _NullableTypes_pb2.NullableBool
    http_only: _NullableTypes_pb2.NullableBool
    same_site: RpcHttpCookie.SameSite
    max_age: _NullableTypes_pb2.NullableDouble
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., domain: _Optional[_Union[_NullableTypes_pb2.NullableString, _Mapping]] = ..., path: _Optional[_Union[_NullableTypes_pb2.NullableString, _Mapping]] = ..., expires: _Optional[_Union[_NullableTypes_pb2.NullableTimestamp, _Mapping]] = ..., secure: _Optional[_Union[_NullableTypes_pb2.NullableBool, _Mapping]] = ..., http_only: _Optional[_Union[_NullableTypes_pb2.NullableBool, _Mapping]] = ..., same_site: _Optional[_Union[RpcHttpCookie.SameSite, str]] = ..., max_age: _Optional[_Union[_NullableTypes_pb2.NullableDouble, _Mapping]] = ...) -> None: ...

class RpcHttp(_message.Message):
    __slots__ = ("method", "url", "headers", "body", "params", "status_code", "query", "enable_content_negotiation", "rawBody", "identities", "cookies", "nullable_headers", "nullable_params", "nullable_query")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class QueryEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class NullableHeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _NullableTypes_pb2.NullableString
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_NullableTypes_pb2.NullableString, _Mapping]] = ...) -> None: ...
    class NullableParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _NullableTypes_pb2.NullableString
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_NullableTypes_pb2.NullableString, _Mapping]] = ...) -> None: ...
    class NullableQueryEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _NullableTypes_pb2.NullableString
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_NullableTypes_pb2.NullableString, _Mapping]] = ...) -> None: ...
    METHOD_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    ENABLE_CONTENT_NEGOTIATION_FIELD_NUMBER: _ClassVar[int]
    RAWBODY_FIELD_NUMBER: _ClassVar[int]
    IDENTITIES_FIELD_NUMBER: _ClassVar[int]
    COOKIES_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_HEADERS_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_PARAMS_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_QUERY_FIELD_NUMBER: _ClassVar[int]
    method: str
    url: str
    headers: _containers.ScalarMap[str, str]
    body: TypedData
    params: _containers.ScalarMap[str, str]
    status_code: str
    query: _containers.ScalarMap[str, str]
    enable_content_negotiation: bool
    rawBody: TypedData
    identities: _containers.RepeatedCompositeFieldContainer[_ClaimsIdentityRpc_pb2.RpcClaimsIdentity]
    cookies: _containers.RepeatedCompositeFieldContainer[RpcHttpCookie]
    nullable_headers: _containers.MessageMap[str, _NullableTypes_pb2.NullableString]
    nullable_params: _containers.MessageMap[str, _NullableTypes_pb2.NullableString]
    nullable_query: _containers.MessageMap[str, _NullableTypes_pb2.NullableString]
    def __init__(self, method: _Optional[str] = ..., url: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., body: _Optional[_Union[TypedData, _Mapping]] = ..., params: _Optional[_Mapping[str, str]] = ..., status_code: _Optional[str] = ..., query: _Optional[_Mapping[str, str]] = ..., enable_content_negotiation: bool = ..., rawBody: _Optional[_Union[TypedData, _Mapping]] = ..., identities: _Optional[_Iterable[_Union[_ClaimsIdentityRpc_pb2.RpcClaimsIdentity, _Mapping]]] = ..., cookies: _Optional[_Iterable[_Union[RpcHttpCookie, _Mapping]]] = ..., nullable_headers: _Optional[_Mapping[str, _NullableTypes_pb2.NullableString]] = ..., nullable_params: _Optional[_Mapping[str, _NullableTypes_pb2.NullableString]] = ..., nullable_query: _Optional[_Mapping[str, _NullableTypes_pb2.NullableString]] = ...) -> None: ...

class ModelBindingData(_message.Message):
    __slots__ = ("version", "source", "content_type", "content")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    version: str
    source: str
    content_type: str
    content: bytes
    def __init__(self, version: _Optional[str] = ..., source: _Optional[str] = ..., content_type: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class CollectionModelBindingData(_message.Message):
    __slots__ = ("model_binding_data",)
    MODEL_BINDING_DATA_FIELD_NUMBER: _ClassVar[int]
    model_binding_data: _containers.RepeatedCompositeFieldContainer[ModelBindingData]
    def __init__(self, model_binding_data: _Optional[_Iterable[_Union[ModelBindingData, _Mapping]]] = ...) -> None: ...

class RpcRetryOptions(_message.Message):
    __slots__ = ("max_retry_count", "delay_interval", "minimum_interval", "maximum_interval", "retry_strategy")
    class RetryStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        exponential_backoff: _ClassVar[RpcRetryOptions.RetryStrategy]
        fixed_delay: _ClassVar[RpcRetryOptions.RetryStrategy]
    exponential_backoff: RpcRetryOptions.RetryStrategy
    fixed_delay: RpcRetryOptions.RetryStrategy
    MAX_RETRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELAY_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    MINIMUM_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    RETRY_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    max_retry_count: int
    delay_interval: _duration_pb2.Duration
    minimum_interval: _duration_pb2.Duration
    maximum_interval: _duration_pb2.Duration
    retry_strategy: RpcRetryOptions.RetryStrategy
    def __init__(self, max_retry_count: _Optional[int] = ..., delay_interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., minimum_interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., maximum_interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_strategy: _Optional[_Union[RpcRetryOptions.RetryStrategy, str]] = ...) -> None: ...
