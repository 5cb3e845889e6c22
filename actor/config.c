/* The GPA_CONFIG file: a JSON object of option keys, parsed with jansson.
 * Each value goes through the same parser as the environment's text. */
#include <stdio.h>

#include "actor/internal.h"

bool gpa__config_apply(const char *file, const char *key, const char *text, gpa__opts *vals, bool *set);
void gpa__config_read(const char *path, gpa__opts *vals, bool *set);

#ifdef GPA_HAVE_JANSSON
#include <jansson.h>

void gpa__config_read(const char *path, gpa__opts *vals, bool *set) {
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) {
    gpa__log(GPA_LOG_WARN, GPA_LOG_WARN, "GPA_CONFIG=%s: %s (line %d); ignoring the file", path, err.text, err.line);
    return;
  }
  if (!json_is_object(root)) {
    gpa__log(GPA_LOG_WARN, GPA_LOG_WARN, "GPA_CONFIG=%s: the top level is not an object; ignoring the file", path);
    json_decref(root);
    return;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    char text[512];
    switch (json_typeof(v)) {
      case JSON_STRING: snprintf(text, sizeof text, "%s", json_string_value(v)); break;
      case JSON_INTEGER: snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
      case JSON_TRUE: snprintf(text, sizeof text, "true"); break;
      case JSON_FALSE: snprintf(text, sizeof text, "false"); break;
      default:
        gpa__log(GPA_LOG_WARN, GPA_LOG_WARN, "%s: ignoring \"%s\": expected a string, an integer or a boolean", path,
                 key);
        continue;
    }
    gpa__config_apply(path, key, text, vals, set);
  }
  json_decref(root);
}
#else
void gpa__config_read(const char *path, gpa__opts *vals, bool *set) {
  (void)vals;
  (void)set;
  gpa__log(GPA_LOG_WARN, GPA_LOG_WARN, "GPA_CONFIG=%s: built without JSON support (libjansson-dev); ignoring it", path);
}
#endif
