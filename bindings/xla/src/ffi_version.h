/* The names that differ between the XLA FFI C API versions the handlers
 * build against, chosen by the header's XLA_FFI_API_MINOR (its enums and
 * typedefs are invisible to the preprocessor):
 *
 *   0.3 (jaxlib 0.10.x)          0.4 (jaxlib 0.11.x)
 *   XLA_FFI_Extension_Base       XLA_FFI_InternalExtension (same layout: size, type, next;
 *                                the metadata query still comes as one)
 *   XLA_FFI_Error_GetMessage     XLA_FFI_Error_GetDetails (same slot in XLA_FFI_Api; its
 *                                args add the error code after the message)
 *   struct XLA_FFI_ExecutionContext  struct XLA_FFI_InvokeContext (the old name a typedef)
 *
 * 0.5 (jaxlib 0.12.0) only appended XLA_FFI_CustomOptions_Get to the API
 * table. Everything else the handlers use kept its name and layout. The structs
 * that grew (the handler bundle's record stage, the register args after
 * it) are filled by designated initializers, so their sizes come from the
 * header too. A library reports the version of the header it was built
 * against in the metadata query, and XLA accepts handlers of its own
 * version or older: build against the jaxlib you run (docs/xla.md). */
#ifndef GPA_XLA_FFI_VERSION_H
#define GPA_XLA_FFI_VERSION_H
#include "xla/ffi/api/c_api.h"

#if XLA_FFI_API_MAJOR != 0
#error "gpuactor's XLA handlers know the XLA FFI C API 0.x (tested: 0.3, 0.4, 0.5)"
#endif

#if XLA_FFI_API_MINOR >= 4
typedef XLA_FFI_InternalExtension gpa_ffi_extension;
typedef XLA_FFI_Error_GetDetails_Args gpa_ffi_error_text_args;
#define GPA_FFI_ERROR_TEXT_ARGS_SIZE XLA_FFI_Error_GetDetails_Args_STRUCT_SIZE
/* The API table's entry that reads an error's message (an lvalue). */
#define GPA_FFI_ERROR_TEXT(api) ((api)->XLA_FFI_Error_GetDetails)
/* The struct tag behind XLA_FFI_ExecutionContext, for code that plays XLA
 * and so defines it (the tests). */
#define GPA_FFI_CONTEXT_TAG XLA_FFI_InvokeContext
#else
typedef XLA_FFI_Extension_Base gpa_ffi_extension;
typedef XLA_FFI_Error_GetMessage_Args gpa_ffi_error_text_args;
#define GPA_FFI_ERROR_TEXT_ARGS_SIZE XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE
#define GPA_FFI_ERROR_TEXT(api) ((api)->XLA_FFI_Error_GetMessage)
#define GPA_FFI_CONTEXT_TAG XLA_FFI_ExecutionContext
#endif

#endif
