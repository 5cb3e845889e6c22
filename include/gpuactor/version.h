#ifndef GPUACTOR_VERSION_H
#define GPUACTOR_VERSION_H

#define GPA_VERSION_MAJOR 0
#define GPA_VERSION_MINOR 1
#define GPA_VERSION_PATCH 0
/* 0xMMmmpp, comparable with < and >. */
#define GPA_VERSION_HEX ((GPA_VERSION_MAJOR << 16) | (GPA_VERSION_MINOR << 8) | GPA_VERSION_PATCH)
#define GPA_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif
/* Everything declared here is exported; the rest of the library is hidden. */
#pragma GCC visibility push(default)
/* GPA_VERSION_HEX of the library actually loaded. Any thread. */
unsigned gpa_version(void);
/* "0.1.0". Any thread; the string is static. */
const char *gpa_version_string(void);
#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
