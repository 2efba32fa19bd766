app_name = "runtime"

urlpatterns = []
