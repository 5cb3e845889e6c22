/* The layout of a gpa_comm_id: a magic, a version and a random token; the
 * rest is zero (kept for an engine's own bootstrap data, such as NCCL's
 * unique id). */
#ifndef GPA_COMM_ID_H
#define GPA_COMM_ID_H
#include <stdbool.h>

#include "gpuactor/comm.h"

#define GPA__COMM_ID_MAGIC "GPAC"
#define GPA__COMM_ID_VERSION 1
#define GPA__COMM_TOKEN_OFF 8
#define GPA__COMM_TOKEN_BYTES 32

bool gpa__comm_id_valid(const gpa_comm_id *id);
/* 31 bits of the token (an MPI_Comm_split color). */
int gpa__comm_id_color(const gpa_comm_id *id);

#endif
